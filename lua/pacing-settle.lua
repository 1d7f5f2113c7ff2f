-- Corrects a dependency's token buckets once a call's real usage is known: a call that used fewer
-- units than it reserved gives them back, one that used more is charged the rest. A refund never
-- moves a TAT before now (a full bucket holds no more than its burst); a charge starts from now
-- when the TAT has passed. A bucket whose state expired meanwhile has nothing to correct.
-- KEYS[1] state hash (see pacing-reserve.lua)
-- ARGV[1] keep ms (as for pacing-reserve.lua)   ARGV[2..] per bucket: name, units used − units reserved
-- Returns the number of buckets corrected
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local keep = tonumber(ARGV[1])
local fields = {}
local latest = now
for i = 2, #ARGV, 2 do
  local name = ARGV[i]
  local delta = tonumber(ARGV[i + 1])
  local hash = redis.call('HMGET', KEYS[1], 'tat:' .. name, 'rate:' .. name)
  local tat = tonumber(hash[1])
  local rate = tonumber(hash[2])
  if tat ~= nil and rate ~= nil and rate > 0 and delta ~= 0 then
    if delta < 0 then tat = math.max(now, tat + delta / rate) else tat = math.max(now, tat) + delta / rate end
    if tat > latest then latest = tat end
    fields[#fields + 1] = 'tat:' .. name
    fields[#fields + 1] = string.format('%.3f', tat)
  end
end
if #fields == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(fields))
if redis.call('PTTL', KEYS[1]) < math.ceil(latest - now) + keep then redis.call('PEXPIRE', KEYS[1], math.ceil(latest - now) + keep) end
return #fields / 2
