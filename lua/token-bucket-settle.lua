-- Corrects a token bucket by what a run actually used: adds `delta` tokens (negative: removes them)
-- after refilling it for the time elapsed, atomically. A bucket never holds more than `capacity`;
-- heavy use may take it below zero, down to -capacity, so the tenant pays it back by waiting.
-- Time comes from the Redis server (TIME), as in token-bucket-take.lua, which shares the key.
-- KEYS[1]  bucket hash {tokens, ts}
-- ARGV[1]  capacity   ARGV[2] refill per second (> 0)   ARGV[3] delta
-- Returns  tokens after the correction (string)
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local delta = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = capacity
  ts = now
end
if now > ts then
  tokens = math.min(capacity, tokens + (now - ts) * rate / 1000)
  ts = now
end

tokens = math.max(-capacity, math.min(capacity, tokens + delta))

redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(ts))
-- Kept until the bucket is full again when left idle; then a missing key means the same.
redis.call('PEXPIRE', KEYS[1], math.ceil((capacity - tokens) * 1000 / rate) + 1000)
return tostring(tokens)
