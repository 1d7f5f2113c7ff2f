-- Gives a lease's permits back and announces it, atomically, so waiting processors retry at once
-- instead of polling. Only the holder knows its token, so only the holder can release; a repeated
-- or stale release removes nothing and wakes nobody.
-- KEYS[1..n] the lease's scope zsets   ARGV[1] lease token   ARGV[2] wake-up channel (sharded, in the permit slot)
-- ARGV[3..n+2] the scopes' names, announced (space-separated) for those released
-- Returns how many scopes held the token.
local released = {}
for i = 1, #KEYS do
  if redis.call('ZREM', KEYS[i], ARGV[1]) == 1 then released[#released + 1] = ARGV[i + 2] end
end
if #released > 0 then redis.call('SPUBLISH', ARGV[2], table.concat(released, ' ')) end
return #released
