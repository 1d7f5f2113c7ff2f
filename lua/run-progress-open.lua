-- Reads what an attempt of a run starts from, in one round trip: the outputs of the steps an
-- earlier delivery or attempt completed, whether the run's cancellation was requested, and whether
-- its submission's answer (202 or 503) is still pending.
-- KEYS[1] the run's steps hash (step id -> output JSON)   KEYS[2] the run's cancellation key
-- KEYS[3] the run's answer-pending mark
-- Returns {cancel reason or '', '1' if the answer is pending else '', step id, output, step id, output, ...}
local reply = {redis.call('GET', KEYS[2]) or '', redis.call('EXISTS', KEYS[3]) == 1 and '1' or ''}
local steps = redis.call('HGETALL', KEYS[1])
for i = 1, #steps do reply[#reply + 1] = steps[i] end
return reply
