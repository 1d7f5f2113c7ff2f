-- Reads what an attempt of a run starts from, in one round trip: the outputs of the steps an
-- earlier delivery or attempt completed, and whether the run's cancellation was requested.
-- KEYS[1] the run's steps hash (step id -> output JSON)   KEYS[2] the run's cancellation key
-- Returns {cancel reason or '', step id, output, step id, output, ...}
local reply = {redis.call('GET', KEYS[2]) or ''}
local steps = redis.call('HGETALL', KEYS[1])
for i = 1, #steps do reply[#reply + 1] = steps[i] end
return reply
