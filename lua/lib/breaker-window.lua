-- Shared by the scripts that count calls in a breaker's sliding window, so they bucket and prune it
-- by the same rule. src/redis/scripts.ts puts this file in front of each script whose first line
-- is `-- uses: breaker-window`; it is not a script of its own.
-- The window is a hash of time buckets of width windowMs / 10: `<bucket>:c|f|s` → calls, failures, slow calls.

-- The bucket a call ending at `now` (ms, from Redis TIME) counts in.
local function breaker_bucket(now, window)
  return math.floor(now / math.max(1, math.floor(window / 10)))
end

-- Sums of the window at `key` up to `now`, dropping the buckets older than it, so the hash stays
-- small. A bucket counts while its start is inside the window, so no call older than windowMs ever does.
local function breaker_window_sums(key, now, window)
  local width = math.max(1, math.floor(window / 10))
  local sums = {c = 0, f = 0, s = 0}
  local fields = redis.call('HGETALL', key)
  for i = 1, #fields, 2 do
    local b, kind = string.match(fields[i], '^(%d+):(%a)$')
    if tonumber(b) * width > now - window then
      sums[kind] = sums[kind] + tonumber(fields[i + 1])
    else
      redis.call('HDEL', key, fields[i])
    end
  end
  return sums
end
