-- uses: breaker-window
-- Adds to a closed breaker's window calls that succeeded promptly, counted by one instance since
-- its last tally instead of recorded one by one (breaker-record.lua records every other outcome,
-- and every outcome while the breaker is not closed). Successes only lower the failure and slow
-- rates, so a tally never trips the breaker. In any other state they say nothing, as a call that
-- was not a probe says nothing to breaker-record.lua, and are dropped; unless the breaker is forced
-- (breaker-force.lua), when every outcome goes into the window whatever the state.
-- KEYS[1] state hash   KEYS[2] window hash   KEYS[3] forced hash, absent unless forced
-- ARGV[1] calls   ARGV[2] windowMs
-- Returns 1 if the calls were counted, 0 if dropped
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if (redis.call('HGET', KEYS[1], 'state') or 'closed') ~= 'closed' and redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
local window = tonumber(ARGV[2])
redis.call('HINCRBY', KEYS[2], breaker_bucket(now, window) .. ':c', tonumber(ARGV[1]))
redis.call('PEXPIRE', KEYS[2], window)
-- Pruned here too: a dependency that never fails would otherwise grow the hash a bucket at a time.
breaker_window_sums(KEYS[2], now, window)
return 1
