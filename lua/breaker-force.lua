-- Sets or clears an operator's override of a dependency's breaker, for drills, and announces it on
-- the breaker's transition channel so every instance re-checks the runs it holds at once.
-- Forced open: breaker-admit.lua refuses every call as if open; forced closed: it admits every
-- call whatever the window says. Either way outcomes still fill the window (breaker-record.lua)
-- but move no state, so the breaker is as it was, with what the window saw, once the force ends.
-- The force expires with its key at `until`, so a forgotten drill ends by itself; instances that
-- miss the end (no message is sent when a key expires) see it in their next read of the state.
-- KEYS[1] forced hash (mode, until ms, at ms)
-- ARGV[1] open | closed | none (clear)   ARGV[2] how long the force lasts, ms (ignored by none)
-- ARGV[3] transition channel (sharded, in the breaker's slot)   ARGV[4] dependency name (announced)
-- Returns {mode in force after the call ('none' when cleared), until ms (0 when none), 1 if it changed anything else 0}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mode = ARGV[1]

local function announce(forced, until_ms)
  redis.call('SPUBLISH', ARGV[3], cjson.encode({dependency = ARGV[4], forced = forced or cjson.null, ['until'] = until_ms or cjson.null, at = now}))
end

if mode == 'none' then
  if redis.call('DEL', KEYS[1]) == 0 then return {'none', 0, 0} end
  announce(nil, nil)
  return {'none', 0, 1}
end

local until_ms = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'mode', mode, 'until', until_ms, 'at', now)
redis.call('PEXPIREAT', KEYS[1], until_ms)
announce(mode, until_ms)
return {mode, until_ms, 1}
