-- Reserves one call's share of every rate limit of a dependency at once (GCRA), or nothing.
-- Each bucket keeps a theoretical arrival time (TAT): the moment it is full again. A call of cost
-- c may go once the bucket holds min(c, burst) units, i.e. at TAT - (burst - min(c, burst)) / rate;
-- a cost above the burst goes when the bucket is full and overdraws it, so the rate still holds.
-- The call goes at the latest of those moments over all buckets and the shared not-before time.
-- A call of a lower class waits for a fuller bucket: it leaves the share `reserve` of the
-- burst to calls of a higher class (1: it goes only once every turn booked so far has passed),
-- so while it waits a higher-class call still finds its turn within reach. A full bucket lets
-- it go, so nothing is lost when no higher-class call comes.
-- While the dependency ramps up after its breaker closed, every limit is scaled by its share.
-- If that is within the caller's maximum wait, every bucket is charged as of that moment and the
-- wait is returned; otherwise nothing is charged and the wait it would need is returned.
-- Time is the Redis server's (TIME). The state records when it was last written ('at'): a server
-- clock that stepped back finds 'at' ahead and shifts every TAT back by the step, so a limiter
-- written before the step does not hold calls for the length of the step.
-- KEYS[1] state hash: tat:<bucket> ms, rate:<bucket> units per ms (as last charged), at ms
-- KEYS[2] observed hash: <bucket> -> per-minute limit the provider reported (expires on its own)
-- KEYS[3] not-before ms (string, expires at that time)
-- ARGV[1] most the caller may wait, ms (negative: only ask)   ARGV[2] burst, ms of the rate
-- ARGV[3] keep ms: how long the state outlives the last reservation's TAT
-- ARGV[4] share of every limit in force, (0, 1]   ARGV[5] reserve: share of the burst left to a higher class, [0, 1]
-- ARGV[6..] per bucket: name, configured limit per minute (0: none), cost in units
-- Returns {1, wait ms} when reserved | {0, wait ms} when not
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_wait = tonumber(ARGV[1])
local burst_ms = tonumber(ARGV[2])
local keep = tonumber(ARGV[3])
local share = tonumber(ARGV[4])
local reserve = tonumber(ARGV[5])

local state = {}
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do state[flat[i]] = tonumber(flat[i + 1]) end
local shift = 0
if state['at'] ~= nil and state['at'] > now then shift = state['at'] - now end

local go = now
local not_before = tonumber(redis.call('GET', KEYS[3]))
if not_before ~= nil and not_before > go then go = not_before end

local buckets = {}
for i = 6, #ARGV, 3 do
  local name = ARGV[i]
  local limit = tonumber(ARGV[i + 1])
  local observed = tonumber(redis.call('HGET', KEYS[2], name))
  if observed ~= nil and observed > 0 and (limit <= 0 or observed < limit) then limit = observed end
  if limit > 0 then
    local rate = limit * share / 60000
    local cost = tonumber(ARGV[i + 2])
    local burst = math.max(1, rate * burst_ms)
    local tat = state['tat:' .. name]
    if tat == nil then tat = now else tat = tat - shift end
    local ready = tat - (1 - reserve) * (burst - math.min(cost, burst)) / rate
    if ready > go then go = ready end
    buckets[#buckets + 1] = {name, rate, cost, tat}
  end
end

local wait = math.ceil(go - now)
if wait > max_wait then return {0, wait} end

local fields = {'at', now}
-- Buckets not charged this time keep their TATs, shifted by the same clock step.
if shift > 0 then
  for field, value in pairs(state) do
    if string.sub(field, 1, 4) == 'tat:' then
      fields[#fields + 1] = field
      fields[#fields + 1] = string.format('%.3f', value - shift)
    end
  end
end
local latest = now
for _, b in ipairs(buckets) do
  local tat = math.max(b[4], go) + b[3] / b[2]
  if tat > latest then latest = tat end
  fields[#fields + 1] = 'tat:' .. b[1]
  fields[#fields + 1] = string.format('%.3f', tat)
  fields[#fields + 1] = 'rate:' .. b[1]
  fields[#fields + 1] = tostring(b[2])
end
redis.call('HSET', KEYS[1], unpack(fields))
-- Once every TAT has passed the buckets are full, which is what a missing state means too.
redis.call('PEXPIRE', KEYS[1], math.ceil(latest - now) + keep)
return {1, wait}
