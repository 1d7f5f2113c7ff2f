-- Records what a dependency's provider said of its rate limits, for every instance's next reservation.
-- Limits are kept for a while only, so a provider that raises its limit is followed again once its
-- responses stop reporting the lower one; the not-before time only ever moves later. A bucket's
-- capacity is the most it was seen to hold (what remained after a call, plus that call): what
-- may go at once after idling, kept as long as the limits.
-- KEYS[1] observed hash (see pacing-reserve.lua)   KEYS[2] not-before ms
-- ARGV[1] ms the observed limits are kept   ARGV[2] not-before ms (0: none)
-- ARGV[3..] per bucket: name, per-minute limit, capacity seen (0: not reported)
-- Returns the not-before time in force (0: none)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local keep = tonumber(ARGV[1])
local not_before = tonumber(ARGV[2])
if #ARGV > 2 then
  for i = 3, #ARGV, 3 do
    local name = ARGV[i]
    local limit = tonumber(ARGV[i + 1])
    local capacity = math.min(tonumber(ARGV[i + 2]), limit)
    redis.call('HSET', KEYS[1], name, ARGV[i + 1])
    local held = tonumber(redis.call('HGET', KEYS[1], 'cap:' .. name)) or 0
    if capacity > held then redis.call('HSET', KEYS[1], 'cap:' .. name, capacity) end
  end
  redis.call('PEXPIRE', KEYS[1], keep)
end
local current = tonumber(redis.call('GET', KEYS[2])) or 0
if not_before > now and not_before > current then
  redis.call('SET', KEYS[2], tostring(not_before), 'PX', not_before - now)
  current = not_before
end
if current <= now then return 0 end
return current
