-- Folds one completed run's input+output tokens into its workflow's moving tokens per run, atomically,
-- so processors finishing runs of one workflow at once never lose a sample.
-- KEYS[1]  estimate hash {per_run, samples}
-- ARGV[1]  tokens of the run   ARGV[2] weight of the newest run (0..1]   ARGV[3] keep for ms
-- Returns  {tokens per run (string), samples}
local sample = tonumber(ARGV[1])
local weight = tonumber(ARGV[2])

local state = redis.call('HMGET', KEYS[1], 'per_run', 'samples')
local per_run = tonumber(state[1])
local samples = tonumber(state[2]) or 0
if per_run == nil then
  per_run = sample
  samples = 0
else
  per_run = per_run + weight * (sample - per_run)
end
samples = samples + 1

redis.call('HSET', KEYS[1], 'per_run', tostring(per_run), 'samples', samples)
-- A workflow no run completed for that long is measured afresh.
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return {tostring(per_run), samples}
