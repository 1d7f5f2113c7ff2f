-- Decides whether one call to a dependency may go out, against the breaker every instance shares.
-- An open breaker whose wait is over turns half-open right here, on the first call that asks, so
-- no instance needs a timer and exactly one transition is announced however many instances ask.
-- Half-open lets a few probe calls through; each holds a lease (member = caller's token, score =
-- expiry ms) so a probe whose caller vanished frees its slot after the lease instead of never.
-- An operator's force (breaker-force.lua) decides before any of that: forced open refuses the call
-- until the force ends, forced closed lets it through as no probe, and neither moves the state.
-- KEYS[1] state hash (state, retryAt while open, probeSuccesses while half-open)   KEYS[2] probes zset
-- KEYS[3] forced hash (mode, until), absent unless forced
-- ARGV[1] caller's token   ARGV[2] half-open probes allowed at once   ARGV[3] probe lease ms
-- ARGV[4] keep ms: how long idle state and probes outlive their last write
-- ARGV[5] transition channel (sharded, in the breaker's slot)   ARGV[6] dependency name (announced)
-- Returns {1, 1 if the call is a probe else 0} | {0, 'open' | 'half_open', retry-at ms}
-- (half-open and full: the earliest probe lease expiry, when a slot frees at the latest).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token = ARGV[1]
local probes = tonumber(ARGV[2])
local lease = tonumber(ARGV[3])
local keep = tonumber(ARGV[4])

local forced = redis.call('HMGET', KEYS[3], 'mode', 'until')
if forced[1] == 'open' then return {0, 'open', tonumber(forced[2])} end
if forced[1] == 'closed' then return {1, 0} end

local hash = redis.call('HMGET', KEYS[1], 'state', 'retryAt')
local state = hash[1]
if state == 'open' then
  local retry_at = tonumber(hash[2])
  if now < retry_at then return {0, 'open', retry_at} end
  redis.call('HSET', KEYS[1], 'state', 'half_open', 'probeSuccesses', 0)
  redis.call('HDEL', KEYS[1], 'retryAt')
  redis.call('PEXPIRE', KEYS[1], keep)
  -- Leases of an earlier half-open period belong to calls whose outcomes no longer count.
  redis.call('DEL', KEYS[2])
  redis.call('SPUBLISH', ARGV[5], cjson.encode({dependency = ARGV[6], from = 'open', to = 'half_open', at = now, retryAt = cjson.null}))
  state = 'half_open'
end
if state ~= 'half_open' then return {1, 0} end

redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
-- A call retried after its reply was lost finds its own lease: it renews that slot, takes no second.
if not redis.call('ZSCORE', KEYS[2], token) and redis.call('ZCARD', KEYS[2]) >= probes then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {0, 'half_open', tonumber(first[2])}
end
redis.call('ZADD', KEYS[2], now + lease, token)
-- keep covers the longest lease, and the state must outlive its probes or their outcomes are lost.
redis.call('PEXPIRE', KEYS[2], keep)
redis.call('PEXPIRE', KEYS[1], keep)
return {1, 1}
