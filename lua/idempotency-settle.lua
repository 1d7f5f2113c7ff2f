-- Settles a claimed Idempotency-Key, only for the claimant (fenced by its token), atomically:
-- 'store' keeps the answer for replay; 'forget' frees the key (a refusal may be retried).
-- KEYS[1] idempotency hash   ARGV[1] claim token   ARGV[2] 'store' | 'forget'
-- ARGV[3] status   ARGV[4] body   ARGV[5] how long to keep a stored answer, ms
-- Returns 1 if settled, 0 if the claim was no longer this token's (expired and taken over).
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
if ARGV[2] == 'forget' then
  redis.call('DEL', KEYS[1])
  return 1
end
redis.call('HSET', KEYS[1], 'state', 'done', 'status', ARGV[3], 'body', ARGV[4])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[5]))
return 1
