-- Shared by the scripts that keep a token bucket (a hash {tokens, ts}), so every one of them reads
-- and refills it by the same rule. src/redis/scripts.ts puts this file in front of each script
-- whose first line is `-- uses: token-bucket-refill`; it is not a script of its own.

-- The bucket at `key` refilled at `rate` tokens per second up to `now` (ms, from Redis TIME).
-- Returns tokens, ts (the time it is refilled up to). A missing bucket is full.
-- A server clock that stepped back (failover) must not mint tokens; it only stops refilling.
-- The level never exceeds `capacity`, also when the capacity was lowered since it was written.
local function refill_token_bucket(key, capacity, rate, now)
  local state = redis.call('HMGET', key, 'tokens', 'ts')
  local tokens = tonumber(state[1])
  local ts = tonumber(state[2])
  if tokens == nil or ts == nil then return capacity, now end
  if now > ts then
    tokens = tokens + (now - ts) * rate / 1000
    ts = now
  end
  return math.min(capacity, tokens), ts
end
