-- uses: token-bucket-refill
-- Corrects a token bucket by what a run actually used, atomically, after refilling it for the time
-- elapsed: removes `charge` tokens, and gives the run's reservation back once per run (a marker key
-- remembers it, so a redelivered run or a withdrawn run that landed anyway cannot return it twice).
-- A bucket never holds more than `capacity`; heavy use may take it below zero, down to -capacity,
-- so the tenant pays it back by waiting. Time comes from the Redis server (TIME), as in
-- token-bucket-take.lua, which shares the bucket key.
-- KEYS[1]  bucket hash {tokens, ts}   KEYS[2] marker: this run's reservation was given back
-- ARGV[1]  capacity   ARGV[2] refill per second (> 0)   ARGV[3] charge (tokens used, >= 0)
-- ARGV[4]  reservation to give back (0: none)   ARGV[5] keep the marker until (epoch ms)
-- Returns  {tokens after the correction (string), 1 if the reservation was given back now else 0}
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local charge = tonumber(ARGV[3])
local reservation = tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local returned = 0
if reservation > 0 then
  local keep_ms = math.max(1000, tonumber(ARGV[5]) - now)
  if redis.call('SET', KEYS[2], '1', 'NX', 'PX', keep_ms) then returned = 1 end
end
local delta = returned * reservation - charge

local tokens, ts = refill_token_bucket(KEYS[1], capacity, rate, now)
tokens = math.max(-capacity, math.min(capacity, tokens + delta))

redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(ts))
-- Kept until the bucket is full again when left idle; then a missing key means the same.
redis.call('PEXPIRE', KEYS[1], math.ceil((capacity - tokens) * 1000 / rate) + 1000)
return {tostring(tokens), returned}
