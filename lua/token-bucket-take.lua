-- uses: token-bucket-refill
-- Takes `cost` tokens from a tenant's bucket after refilling it for the time elapsed, atomically.
-- Time comes from the Redis server (TIME), so API instances with skewed clocks share one clock.
-- KEYS[1]  bucket hash {tokens, ts}
-- ARGV[1]  capacity   ARGV[2] refill per second (may be fractional)   ARGV[3] cost
-- Returns  {allowed (1|0), tokens left (string), ms until `cost` tokens exist (-1: never)}
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local tokens, ts = refill_token_bucket(KEYS[1], capacity, rate, now)

local allowed = 0
local wait_ms = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
elseif rate > 0 then
  -- After a clock step back refilling resumes only once the clock passes ts again.
  wait_ms = math.ceil((cost - tokens) * 1000 / rate) + math.max(0, ts - now)
else
  wait_ms = -1
end

redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(ts))
-- An idle bucket is full again after capacity/rate seconds; keep it no longer than that. A bucket
-- that settlement took below zero (token-bucket-settle.lua) needs longer to be full again.
local ttl = 86400000
if rate > 0 then ttl = math.ceil(math.max(capacity, capacity - tokens) * 1000 / rate) + 1000 end
redis.call('PEXPIRE', KEYS[1], ttl)
return {allowed, tostring(tokens), wait_ms}
