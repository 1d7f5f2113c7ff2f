-- Corrects a dependency's buckets once a call's real usage is known, or once a run's reserved
-- turns were not all used: a call that used fewer units than it reserved gives them back, one
-- that used more is charged the rest; a correction of the requests bucket corrects the tenant's
-- own bucket too (see pacing-reserve.lua). A refund never moves a TAT before now (a full bucket
-- holds no more than its burst); a charge starts from now when the TAT has passed. A bucket whose
-- state expired meanwhile has nothing to correct.
-- KEYS[1] state hash (see pacing-reserve.lua)   KEYS[2] tenants hash (see pacing-reserve.lua)
-- ARGV[1] keep ms (as for pacing-reserve.lua)   ARGV[2] tenant ('' for none)
-- ARGV[3..] per bucket: name, units used − units reserved
-- Returns the number of buckets corrected (the tenant's own not counted)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local keep = tonumber(ARGV[1])
local tenant = ARGV[2]

local function corrected(tat, rate, delta)
  if delta < 0 then return math.max(now, tat + delta / rate) end
  return math.max(now, tat) + delta / rate
end

local fields = {}
local latest = now
for i = 3, #ARGV, 2 do
  local name = ARGV[i]
  local delta = tonumber(ARGV[i + 1])
  local hash = redis.call('HMGET', KEYS[1], 'tat:' .. name, 'rate:' .. name)
  local tat = tonumber(hash[1])
  local rate = tonumber(hash[2])
  if tat ~= nil and rate ~= nil and rate > 0 and delta ~= 0 then
    tat = corrected(tat, rate, delta)
    if tat > latest then latest = tat end
    fields[#fields + 1] = 'tat:' .. name
    fields[#fields + 1] = string.format('%.3f', tat)
    if name == 'requests' and tenant ~= '' then
      local own = redis.call('HMGET', KEYS[2], 'tat:' .. tenant, 'rate:' .. tenant)
      local own_tat = tonumber(own[1])
      local own_rate = tonumber(own[2])
      if own_tat ~= nil and own_rate ~= nil and own_rate > 0 then
        redis.call('HSET', KEYS[2], 'tat:' .. tenant, string.format('%.3f', corrected(own_tat, own_rate, delta)))
      end
    end
  end
end
if #fields == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(fields))
if redis.call('PTTL', KEYS[1]) < math.ceil(latest - now) + keep then redis.call('PEXPIRE', KEYS[1], math.ceil(latest - now) + keep) end
return #fields / 2
