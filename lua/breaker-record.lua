-- uses: breaker-window
-- Records one call's outcome against the breaker every instance shares, and trips or settles it,
-- atomically: two instances recording at once can neither both open it nor lose a probe's verdict.
-- Closed: the call goes into a sliding window of time buckets (lib/breaker-window.lua) holding calls,
-- failures and slow calls; buckets older than the window are dropped here, so the hash stays small.
-- Prompt successes may come in bulk instead (breaker-tally.lua).
-- Half-open: only a probe's outcome counts (its lease is taken back); other calls were let through
-- before the trip or by no one, and say nothing about the dependency's recovery.
-- Open: outcomes are late answers to calls made before the trip and are ignored.
-- Closing stamps closedAt (Redis-clock ms), from which every instance derives the dependency's
-- ramp-up (src/config/ramp-up.ts); opening removes it.
-- Forced (breaker-force.lua): the outcome only goes into the window and nothing changes state, so
-- a drill neither trips nor settles the breaker behind the operator's back; a probe admitted before
-- the force gives its lease back.
-- KEYS[1] state hash (state, retryAt, probeSuccesses, closedAt)   KEYS[2] window hash   KEYS[3] probes zset
-- KEYS[4] forced hash, absent unless forced
-- ARGV[1] caller's token ('' if the call was not a probe)
-- ARGV[2] outcome: success | failure | released (abandoned by us: frees a probe slot, counts as nothing)
-- ARGV[3] duration ms   ARGV[4] windowMs   ARGV[5] minimumCalls   ARGV[6] failureThreshold
-- ARGV[7] failureRateThreshold   ARGV[8] slowCallMs   ARGV[9] slowCallRateThreshold   ARGV[10] openMs
-- ARGV[11] halfOpenSuccesses   ARGV[12] keep ms: how long idle state outlives its last write
-- ARGV[13] transition channel (sharded, in the breaker's slot)   ARGV[14] dependency name (announced)
-- Returns {state after the call, 1 if this call changed it else 0}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token = ARGV[1]
local outcome = ARGV[2]
local keep = tonumber(ARGV[12])
local state = redis.call('HGET', KEYS[1], 'state') or 'closed'

local function announce(from, to, retry_at)
  redis.call('SPUBLISH', ARGV[13], cjson.encode({dependency = ARGV[14], from = from, to = to, at = now, retryAt = retry_at or cjson.null}))
end

local function open(from)
  local retry_at = now + tonumber(ARGV[10])
  redis.call('HSET', KEYS[1], 'state', 'open', 'retryAt', retry_at)
  redis.call('HDEL', KEYS[1], 'probeSuccesses', 'closedAt')
  -- An open breaker must still be there at retryAt to turn half-open, and a while after for the probe.
  redis.call('PEXPIREAT', KEYS[1], retry_at + keep)
  redis.call('DEL', KEYS[2], KEYS[3])
  announce(from, 'open', retry_at)
  return {'open', 1}
end

local window = tonumber(ARGV[4])

local function count_in_window()
  local bucket = breaker_bucket(now, window)
  redis.call('HINCRBY', KEYS[2], bucket .. ':c', 1)
  if outcome == 'failure' then redis.call('HINCRBY', KEYS[2], bucket .. ':f', 1) end
  if tonumber(ARGV[3]) >= tonumber(ARGV[8]) then redis.call('HINCRBY', KEYS[2], bucket .. ':s', 1) end
  redis.call('PEXPIRE', KEYS[2], window)
  return breaker_window_sums(KEYS[2], now, window)
end

if redis.call('EXISTS', KEYS[4]) == 1 then
  if token ~= '' then redis.call('ZREM', KEYS[3], token) end
  if outcome ~= 'released' then count_in_window() end
  return {state, 0}
end

if state == 'half_open' then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if token == '' or redis.call('ZREM', KEYS[3], token) == 0 or outcome == 'released' then return {'half_open', 0} end
  if outcome == 'failure' then return open('half_open') end
  if redis.call('HINCRBY', KEYS[1], 'probeSuccesses', 1) < tonumber(ARGV[11]) then
    redis.call('PEXPIRE', KEYS[1], keep)
    return {'half_open', 0}
  end
  redis.call('HSET', KEYS[1], 'state', 'closed', 'closedAt', now)
  redis.call('HDEL', KEYS[1], 'probeSuccesses', 'retryAt')
  redis.call('PEXPIRE', KEYS[1], keep)
  redis.call('DEL', KEYS[2], KEYS[3])
  announce('half_open', 'closed', nil)
  return {'closed', 1}
end
if state == 'open' or outcome == 'released' then return {state, 0} end

local sums = count_in_window()
local calls = sums.c
if calls >= tonumber(ARGV[5]) and (sums.f >= tonumber(ARGV[6]) or sums.f / calls >= tonumber(ARGV[7]) or sums.s / calls >= tonumber(ARGV[9])) then
  return open('closed')
end
return {'closed', 0}
