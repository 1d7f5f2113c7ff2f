-- Takes a permit at every given scope or at none, atomically: a run never sits on a tenant permit
-- while the global cap keeps it from running. Permits are leases (member = token, score = expiry ms)
-- and lapsed ones are purged here, so a crashed holder's permits come back after its TTL.
-- Limits are read from the limits hash on every call, falling back to the config default, so a
-- change made at run time holds on every instance at the next acquisition.
-- KEYS[1..n] scope zsets   KEYS[n+1] limits hash (field → limit)   KEYS[n+2..] adaptive figures
-- (hashes), then, for a fair share, the waiting tenants (zset: tenant → claim expiry ms) and this
-- tenant's waiting calls (zset: caller → claim expiry ms)
-- ARGV[1] lease token   ARGV[2] lease TTL ms   ARGV[3] the index in KEYS of the waiting tenants (0: no
-- fair share; the tenant's waiting calls follow it)   ARGV[4] the tenant   ARGV[5] the caller (the
-- same on every try of one call)   ARGV[6] how long a refused call's claim lasts, ms
-- then six per scope i, from ARGV[a] with a = 6i + 1: its limits hash field, its default limit, its
-- share, the index in KEYS of its adaptive concurrency figure (0: none), that figure's max, and the
-- index of an earlier scope whose limit in force it shares fairly (0: none).
-- A limit of 0 closes the scope. A share below 1 (the batch class's part of the global cap, or a
-- dependency's ramp-up after its breaker closed) turns an open limit into max(1, floor(limit × share)),
-- as limitAtShare in src/util/limit-share.ts does. A dependency with adaptive concurrency is held
-- to the lower of that and its figure (lua/adaptive-limit-update.lua; max while unset), rounded down,
-- as effectiveDependencyLimit in src/permits/adaptive-limit-policy.ts does.
-- A fair share (a tenant's part of a dependency) is the shared scope's limit while no other tenant
-- has a call waiting, else max(1, floor(limit / (tenants waiting + 1))), as fairShareLimit in
-- src/util/limit-share.ts does: work-conserving, yet the next permits a busy tenant gives back go
-- to the tenants waiting behind it. A refused call claims its place (renewed on every try, lapsing
-- unless renewed); a granted one gives its claim up, and its tenant's once no call of it waits.
-- Returns {1, lease expiry ms} | {0, index of the first full scope in KEYS order, its count, its limit}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token = ARGV[1]
local ttl = tonumber(ARGV[2])
local waiting = tonumber(ARGV[3])
local tenant = ARGV[4]
local caller = ARGV[5]
local n = (#ARGV - 6) / 6
local limits = KEYS[n + 1]

local function othersWaiting()
  redis.call('ZREMRANGEBYSCORE', KEYS[waiting], '-inf', now)
  local tenants = redis.call('ZCARD', KEYS[waiting])
  if redis.call('ZSCORE', KEYS[waiting], tenant) then tenants = tenants - 1 end
  return tenants
end

local function claim(key, member, expiry, claimMs)
  redis.call('ZADD', key, expiry, member)
  if redis.call('PTTL', key) < claimMs then redis.call('PEXPIRE', key, claimMs) end
end

local function refuse(i, count, limit)
  if waiting > 0 then
    local claimMs = tonumber(ARGV[6])
    claim(KEYS[waiting], tenant, now + claimMs, claimMs)
    claim(KEYS[waiting + 1], caller, now + claimMs, claimMs)
  end
  return {0, i, count, limit}
end

local limitOf = {}
for i = 1, n do
  local a = 6 * i + 1
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  local limit
  local sharedScope = tonumber(ARGV[a + 5])
  if sharedScope > 0 then
    limit = limitOf[sharedScope]
    local others = othersWaiting()
    if limit > 0 and others > 0 then limit = math.max(1, math.floor(limit / (others + 1))) end
  else
    limit = tonumber(redis.call('HGET', limits, ARGV[a])) or tonumber(ARGV[a + 1])
    local share = tonumber(ARGV[a + 2])
    -- The epsilon keeps 100 × 0.57 (= 56.99999…) from losing a whole permit to binary rounding.
    if limit > 0 and share < 1 then limit = math.max(1, math.floor(limit * share + 1e-9)) end
    local figure = tonumber(ARGV[a + 3])
    if figure > 0 then
      local max = tonumber(ARGV[a + 4])
      limit = math.min(limit, math.floor(math.min(max, tonumber(redis.call('HGET', KEYS[figure], 'limit')) or max) + 1e-9))
    end
  end
  limitOf[i] = limit
  local count = redis.call('ZCARD', KEYS[i])
  -- A call retried after its reply was lost finds its own token: that place is already its own.
  if count >= limit and not redis.call('ZSCORE', KEYS[i], token) then return refuse(i, count, limit) end
end

local expiry = now + ttl
for i = 1, n do
  redis.call('ZADD', KEYS[i], expiry, token)
  -- The set outlives its longest lease and no longer, so idle scopes leave nothing behind.
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIREAT', KEYS[i], expiry) end
end
if waiting > 0 then
  local calls = KEYS[waiting + 1]
  redis.call('ZREM', calls, caller)
  redis.call('ZREMRANGEBYSCORE', calls, '-inf', now)
  if redis.call('ZCARD', calls) == 0 then redis.call('ZREM', KEYS[waiting], tenant) end
end
return {1, expiry}
