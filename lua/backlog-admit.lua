-- Records one admitted-but-unfinished run, unless a bound says no, atomically. Entries are leases
-- that expire at the run's deadline plus a grace, so a lost release (crashed sink) cannot leak.
-- KEYS[1] tenant zset   KEYS[2] class zset   KEYS[3] all-runs zset   (member runId, score expiry ms)
-- ARGV[1] runId  ARGV[2] lease expiry (ms since epoch)  ARGV[3] tenant bound  ARGV[4] global bound
-- ARGV[5] most runs of this class allowed ahead ('none': no limit; negative: none at all)
-- ARGV[6] 1 = record even if refused
-- ARGV[7] most runs of this tenant allowed ahead, of any class ('none': no limit; negative: none at all)
-- Returns {outcome, tenant count, class count ahead, all count}; outcome is admitted, tenant_full,
-- global_full, too_late or duplicate; counts are before this run.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, 3 do redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now) end

local run = ARGV[1]
local expiry = tonumber(ARGV[2])
local tenant_n = redis.call('ZCARD', KEYS[1])
local class_n = redis.call('ZCARD', KEYS[2])
local all_n = redis.call('ZCARD', KEYS[3])
if redis.call('ZSCORE', KEYS[3], run) then return {'duplicate', tenant_n, class_n, all_n} end

local outcome = 'admitted'
local max_ahead = tonumber(ARGV[5]) -- nil for 'none'
local max_tenant_ahead = tonumber(ARGV[7]) -- nil for 'none'
if tenant_n >= tonumber(ARGV[3]) then outcome = 'tenant_full'
elseif all_n >= tonumber(ARGV[4]) then outcome = 'global_full'
elseif max_ahead and class_n > max_ahead then outcome = 'too_late'
elseif max_tenant_ahead and tenant_n > max_tenant_ahead then outcome = 'too_late'
end

if outcome == 'admitted' or ARGV[6] == '1' then
  for i = 1, 3 do
    redis.call('ZADD', KEYS[i], expiry, run)
    if redis.call('PTTL', KEYS[i]) < expiry - now then redis.call('PEXPIREAT', KEYS[i], expiry) end
  end
end
return {outcome, tenant_n, class_n, all_n}
