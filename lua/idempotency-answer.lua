-- Reads the answer kept under an Idempotency-Key, without claiming it.
-- KEYS[1] idempotency hash
-- Returns {status, body} once an answer is stored; false while the key is free or only claimed.
local cur = redis.call('HMGET', KEYS[1], 'state', 'status', 'body')
if cur[1] ~= 'done' then return false end
return {cur[2], cur[3]}
