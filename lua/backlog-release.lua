-- Removes a run from the backlog and, when it finished (rather than being withdrawn unsent), the first
-- time only, counts it towards its class's measured service rate and moving service time, atomically
-- (a redelivered terminal event is a no-op).
-- KEYS[1] tenant zset  KEYS[2] class zset  KEYS[3] all-runs zset  KEYS[4] class service hash
-- ARGV[1] runId  ARGV[2] execution ms (-1: unknown)  ARGV[3] bucket seconds  ARGV[4] buckets kept
-- ARGV[5] weight of the newest execution time in the moving average (0..1)
-- ARGV[6] 1 = it finished (count it), 0 = withdrawn (never ran: Kafka did not take it)
-- Returns 1 if the run was in the backlog, else 0.
local removed = redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if removed == 0 or ARGV[6] ~= '1' then return removed end

local t = redis.call('TIME')
local bucket_s = tonumber(ARGV[3])
local bucket = math.floor(tonumber(t[1]) / bucket_s)
redis.call('HINCRBY', KEYS[4], 'b:' .. bucket, 1)
local oldest = bucket - tonumber(ARGV[4])
for _, field in ipairs(redis.call('HKEYS', KEYS[4])) do
  local b = tonumber(string.match(field, '^b:(%d+)$'))
  if b and b <= oldest then redis.call('HDEL', KEYS[4], field) end
end

local exec_ms = tonumber(ARGV[2])
if exec_ms >= 0 then
  local avg = tonumber(redis.call('HGET', KEYS[4], 'service_ms'))
  local w = tonumber(ARGV[5])
  if avg then avg = avg * (1 - w) + exec_ms * w else avg = exec_ms end
  redis.call('HSET', KEYS[4], 'service_ms', tostring(avg))
end
redis.call('PEXPIRE', KEYS[4], 86400000)
return 1
