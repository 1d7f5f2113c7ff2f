-- Takes a permit at every given scope or at none, atomically: a run never sits on a tenant permit
-- while the global cap keeps it from running. Permits are leases (member = token, score = expiry ms)
-- and lapsed ones are purged here, so a crashed holder's permits come back after its TTL.
-- Limits are read from the limits hash on every call, falling back to the config default, so a
-- change made at run time holds on every instance at the next acquisition.
-- KEYS[1..n] scope zsets   KEYS[n+1] limits hash (field → limit)
-- ARGV[1] lease token   ARGV[2] lease TTL ms
-- then per scope i: ARGV[3i] its limits hash field   ARGV[3i+1] its default limit   ARGV[3i+2] share
-- A limit of 0 closes the scope. A share below 1 (the batch class's part of the global cap, or a
-- dependency's ramp-up after its breaker closed) turns an open limit into max(1, floor(limit × share)),
-- as limitAtShare in src/util/limit-share.ts does.
-- Returns {1, lease expiry ms} | {0, index of the first full scope in KEYS order, its count, its limit}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token = ARGV[1]
local ttl = tonumber(ARGV[2])
local limits = KEYS[#KEYS]
local n = #KEYS - 1

for i = 1, n do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  local limit = tonumber(redis.call('HGET', limits, ARGV[3 * i])) or tonumber(ARGV[3 * i + 1])
  local share = tonumber(ARGV[3 * i + 2])
  -- The epsilon keeps 100 × 0.57 (= 56.99999…) from losing a whole permit to binary rounding.
  if limit > 0 and share < 1 then limit = math.max(1, math.floor(limit * share + 1e-9)) end
  local count = redis.call('ZCARD', KEYS[i])
  -- A call retried after its reply was lost finds its own token: that place is already its own.
  if count >= limit and not redis.call('ZSCORE', KEYS[i], token) then return {0, i, count, limit} end
end

local expiry = now + ttl
for i = 1, n do
  redis.call('ZADD', KEYS[i], expiry, token)
  -- The set outlives its longest lease and no longer, so idle scopes leave nothing behind.
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIREAT', KEYS[i], expiry) end
end
return {1, expiry}
