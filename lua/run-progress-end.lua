-- Ends a run's record once per admission: the first delivery to end the run adds its attempt's
-- provider calls and takes the run's calls over all its attempts; a redelivery of an ended run
-- (its outcome published again after a crash before the commit) gets nothing, so the end is
-- counted once. A DLQ replay is a new admission of the same run: its end counts again, with the
-- calls made since the last end only, which took the calls before it.
-- KEYS[1] the run's calls hash (`c:<dependency>` -> calls, `end` -> admittedAt of the admission last ended)
-- ARGV[1] ms the record is kept from now   ARGV[2] the run's admittedAt
-- ARGV[3..] dependency, calls, dependency, calls, ...
-- Returns {'1', dependency, calls, dependency, calls, ...} the first time, {''} after
if redis.call('HGET', KEYS[1], 'end') == ARGV[2] then return {''} end
for i = 3, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], 'c:' .. ARGV[i], ARGV[i + 1]) end
local reply = {'1'}
local taken = {}
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local dependency = string.match(fields[i], '^c:(.+)$')
  if dependency then
    reply[#reply + 1] = dependency
    reply[#reply + 1] = fields[i + 1]
    taken[#taken + 1] = fields[i]
  end
end
if #taken > 0 then redis.call('HDEL', KEYS[1], unpack(taken)) end
redis.call('HSET', KEYS[1], 'end', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return reply
