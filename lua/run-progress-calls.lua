-- Adds the provider calls an attempt of a run made to the run's record, when the run goes on to a
-- next attempt (maybe on another processor), so its end can count the calls of all its attempts.
-- KEYS[1] the run's calls hash (`c:<dependency>` -> calls, `end` once the run ended)
-- ARGV[1] ms the record is kept from now   ARGV[2..] dependency, calls, dependency, calls, ...
-- Returns nothing
for i = 2, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], 'c:' .. ARGV[i], ARGV[i + 1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
