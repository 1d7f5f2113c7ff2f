-- A step boundary of a run, in one round trip: records the output of the step just completed, so a
-- redelivered run does not call it again, and reads whether the run's cancellation was requested,
-- which the next step must know before it starts.
-- KEYS[1] the run's steps hash (step id -> output JSON)   KEYS[2] the run's cancellation key
-- ARGV[1] step id   ARGV[2] output JSON   ARGV[3] ms the run's outputs are kept from now
-- Returns the cancel reason, or '' when there is none
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return redis.call('GET', KEYS[2]) or ''
