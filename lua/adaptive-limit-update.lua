-- Applies one call's signal to a dependency's adaptive concurrency figure (AIMD), atomically, so
-- every processor moves the one figure that permits-acquire.lua caps the dependency with.
-- KEYS[1] the figure's hash (limit: the figure, fractional; decreasedAt: Redis ms of the last cut)
-- ARGV[1] 'congestion' | 'success'   ARGV[2] min   ARGV[3] max   ARGV[4] decrease factor (0 < f < 1)
-- ARGV[5] cooldown ms   ARGV[6] idle reset ms
-- An unset figure is max. The hash expires idleResetMs after the last call, so a dependency left
-- alone starts again from max rather than from whatever its last overload left.
-- Returns {the figure after, as a string (a Lua number loses its fraction on the way out), 1 if this call cut it, else 0}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local min = tonumber(ARGV[2])
local max = tonumber(ARGV[3])
local stored = redis.call('HMGET', KEYS[1], 'limit', 'decreasedAt')
-- Bounds changed by a new config take hold at the next call.
local limit = math.min(max, math.max(min, tonumber(stored[1]) or max))
local cut = 0

if ARGV[1] == 'congestion' then
  local last = tonumber(stored[2])
  -- One cut per cooldown: the calls failing together in one overload burst cut the figure once.
  -- A cut "in the future" (the clock went back in a failover) does not hold cuts off.
  if not last or now - last >= tonumber(ARGV[5]) or now < last then
    limit = math.max(min, limit * tonumber(ARGV[4]))
    redis.call('HSET', KEYS[1], 'decreasedAt', now)
    cut = 1
  end
elseif ARGV[1] == 'success' then
  limit = math.min(max, limit + 1 / limit)
else
  return redis.error_reply('unknown signal ' .. tostring(ARGV[1]))
end

redis.call('HSET', KEYS[1], 'limit', tostring(limit))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[6]))
return {tostring(limit), cut}
