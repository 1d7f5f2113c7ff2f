-- Claims an Idempotency-Key for one request, or reports who has it, atomically.
-- KEYS[1] idempotency hash {state, hash, token, status, body}
-- ARGV[1] request hash  ARGV[2] claim token  ARGV[3] claim lease ms (a crashed claimant's key frees up)
-- Returns {'claimed'} | {'conflict'} (same key, other request) | {'pending'} | {'done', status, body}
-- A pending claim asked for again with its own token is the claimant's (it retries after a reply
-- it never got): claimed again, its lease renewed.
local cur = redis.call('HMGET', KEYS[1], 'state', 'hash', 'status', 'body', 'token')
if not cur[1] then
  redis.call('HSET', KEYS[1], 'state', 'pending', 'hash', ARGV[1], 'token', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
  return {'claimed'}
end
if cur[2] ~= ARGV[1] then return {'conflict'} end
if cur[1] == 'done' then return {'done', cur[3], cur[4]} end
if cur[5] == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
  return {'claimed'}
end
return {'pending'}
