-- Takes a permit at every given scope or at none, atomically: a run never sits on a tenant permit
-- while the global cap keeps it from running. Permits are leases (member = token, score = expiry ms)
-- and lapsed ones are purged here, so a crashed holder's permits come back after its TTL.
-- Limits are read from the limits hash on every call, falling back to the config default, so a
-- change made at run time holds on every instance at the next acquisition.
-- KEYS[1..n] scope zsets   KEYS[n+1] limits hash (field → limit)   KEYS[n+2..] adaptive figures (hashes)
-- ARGV[1] lease token   ARGV[2] lease TTL ms
-- then five per scope i, from ARGV[a] with a = 5i - 2: its limits hash field, its default limit,
-- its share, the index in KEYS of its adaptive concurrency figure (0: none), that figure's max.
-- A limit of 0 closes the scope. A share below 1 (the batch class's part of the global cap, or a
-- dependency's ramp-up after its breaker closed) turns an open limit into max(1, floor(limit × share)),
-- as limitAtShare in src/util/limit-share.ts does. A dependency with adaptive concurrency is held
-- to the lower of that and its figure (lua/adaptive-limit-update.lua; max while unset), rounded down,
-- as effectiveDependencyLimit in src/permits/adaptive-limit-policy.ts does.
-- Returns {1, lease expiry ms} | {0, index of the first full scope in KEYS order, its count, its limit}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token = ARGV[1]
local ttl = tonumber(ARGV[2])
local n = (#ARGV - 2) / 5
local limits = KEYS[n + 1]

for i = 1, n do
  local a = 5 * i - 2
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  local limit = tonumber(redis.call('HGET', limits, ARGV[a])) or tonumber(ARGV[a + 1])
  local share = tonumber(ARGV[a + 2])
  -- The epsilon keeps 100 × 0.57 (= 56.99999…) from losing a whole permit to binary rounding.
  if limit > 0 and share < 1 then limit = math.max(1, math.floor(limit * share + 1e-9)) end
  local figure = tonumber(ARGV[a + 3])
  if figure > 0 then
    local max = tonumber(ARGV[a + 4])
    limit = math.min(limit, math.floor(math.min(max, tonumber(redis.call('HGET', KEYS[figure], 'limit')) or max) + 1e-9))
  end
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
