-- Extends a lease at all its scopes, only while its holder still has it at every one (fencing): a
-- lease that lapsed is gone even if nobody has purged it yet, and its holder must learn that rather
-- than resurrect a permit someone else may now count on. What is left of a lost lease is removed
-- at once instead of holding capacity until it lapses too.
-- KEYS[1..n] the lease's scope zsets   ARGV[1] lease token   ARGV[2] TTL ms from now
-- Returns the new lease expiry ms, or 0 when the lease was lost.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token = ARGV[1]
local ttl = tonumber(ARGV[2])

for i = 1, #KEYS do
  local expiry = tonumber(redis.call('ZSCORE', KEYS[i], token))
  if not expiry or expiry <= now then
    for j = 1, #KEYS do redis.call('ZREM', KEYS[j], token) end
    return 0
  end
end

local expiry = now + ttl
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', expiry, token)
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIREAT', KEYS[i], expiry) end
end
return expiry
