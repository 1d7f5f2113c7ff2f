-- Reserves a call's (or a run's calls') share of every rate limit of a dependency at once (GCRA),
-- or nothing, sharing the requests limit fairly among tenants.
-- Each bucket keeps a theoretical arrival time (TAT): the moment it is full again. A cost c may go
-- once the bucket holds min(c, burst) units, i.e. at TAT - (burst - min(c, burst)) / rate; a cost
-- above the burst goes when the bucket is full and overdraws it, so the rate still holds.
-- The call goes at the latest of those moments over all buckets and the shared not-before time.
-- A bucket's burst is the capacity its provider showed (observed 'cap:<bucket>': the most it had
-- left plus the call), else the configured seconds of its rate.
-- Tenants share the requests bucket by weight. Each tenant has a bucket of its own at its fair
-- share f of the rate and burst (computed by every instance from the tenants' demand, recorded
-- here); within it a call may empty the shared bucket. Beyond it the tenant borrows what others
-- leave: only while the shared bucket holds more than the borrow reserve, so a tenant within its
-- share always finds units, and only up to its share s of the borrowable part, so tenants that
-- all want more split it by weight. A call of a lower class waits for a fuller bucket: it leaves
-- the share `reserve` of the burst to calls of a higher class (1: it goes only once every turn
-- booked so far has passed) in its tenant's own bucket, when that tenant asked for higher-class
-- turns within the demand window, and in the shared one when it borrows; within its tenant's
-- share the shared bucket does not hold it back, as that share already bounds what it takes from
-- other tenants. Other buckets apply the class reserve to every call.
-- While the dependency ramps up after its breaker closed, every limit is scaled by its share.
-- If that is within the caller's maximum wait, every bucket (and the tenant's own) is charged as of
-- that moment and the wait is returned; otherwise nothing is charged and the wait it would need is
-- returned. Either way the tenant's demand (units asked, decayed over the demand window) is kept.
-- Time is the Redis server's (TIME). The state records when it was last written ('at'): a server
-- clock that stepped back finds 'at' ahead and shifts every TAT back by the step, so a limiter
-- written before the step does not hold calls for the length of the step.
-- KEYS[1] state hash: tat:<bucket> ms, rate:<bucket> units per ms (as last charged), at ms
-- KEYS[2] observed hash: <bucket> -> per-minute limit, cap:<bucket> -> capacity (expires on its own)
-- KEYS[3] not-before ms (string, expires at that time)
-- KEYS[4] tenants hash: tat:<tenant> ms, d:<tenant> decayed units asked, u:<tenant> ms of d,
--         i:<tenant> ms of its last ask of the highest class (reserve 0)
-- ARGV[1] most the caller may wait, ms (negative: only ask)   ARGV[2] burst, ms of the rate
-- ARGV[3] keep ms: how long the state outlives the last reservation's TAT
-- ARGV[4] share of every limit in force, (0, 1]   ARGV[5] reserve: share of the burst left to a higher class, [0, 1]
-- ARGV[6] tenant ('' for none)   ARGV[7] its fair share f, (0, 1]   ARGV[8] its share s of what may be borrowed, [0, 1]
-- ARGV[9] borrow reserve: share of the burst borrowing leaves, [0, 1)   ARGV[10] demand window ms
-- ARGV[11..] per bucket: name, configured limit per minute (0: none), cost in units
-- Returns {1, wait ms, held} when reserved | {0, wait ms, held} when not; held is 1 when the
-- tenant's share, not the dependency's capacity, is what makes it wait.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_wait = tonumber(ARGV[1])
local burst_ms = tonumber(ARGV[2])
local keep = tonumber(ARGV[3])
local share = tonumber(ARGV[4])
local reserve = tonumber(ARGV[5])
local tenant = ARGV[6]
local fair = tonumber(ARGV[7])
local borrow_share = tonumber(ARGV[8])
local borrow_reserve = tonumber(ARGV[9])
local window = tonumber(ARGV[10])

local state = {}
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do state[flat[i]] = tonumber(flat[i + 1]) end
local shift = 0
if state['at'] ~= nil and state['at'] > now then shift = state['at'] - now end

local go = now
local not_before = tonumber(redis.call('GET', KEYS[3]))
if not_before ~= nil and not_before > go then go = not_before end

local own = nil
local held = 0
local buckets = {}
for i = 11, #ARGV, 3 do
  local name = ARGV[i]
  local limit = tonumber(ARGV[i + 1])
  local seen = redis.call('HMGET', KEYS[2], name, 'cap:' .. name)
  local observed = tonumber(seen[1])
  if observed ~= nil and observed > 0 and (limit <= 0 or observed < limit) then limit = observed end
  if limit > 0 then
    local rate = limit * share / 60000
    local cost = tonumber(ARGV[i + 2])
    local cap = tonumber(seen[2])
    local burst
    if cap ~= nil and cap > 0 then burst = math.max(1, cap * share) else burst = math.max(1, rate * burst_ms) end
    local tat = state['tat:' .. name]
    if tat == nil then tat = now else tat = tat - shift end
    local room = burst - math.min(cost, burst)
    local ready
    if name == 'requests' and tenant ~= '' then
      local mine = redis.call('HMGET', KEYS[4], 'tat:' .. tenant, 'd:' .. tenant, 'u:' .. tenant, 'i:' .. tenant)
      local own_rate = rate * fair
      local own_burst = math.max(1, burst * fair)
      local own_tat = tonumber(mine[1]) or now
      -- Only a tenant that asked for higher-class turns lately has any to leave room for.
      local higher_at = tonumber(mine[4])
      local own_reserve = 0
      if higher_at ~= nil and now - higher_at < window then own_reserve = reserve end
      local own_ready = math.max(tat - room / rate, own_tat - (1 - own_reserve) * (own_burst - math.min(cost, own_burst)) / own_rate)
      local borrow_ready = tat - (1 - math.max(borrow_reserve, reserve)) * room / rate
      local debt = math.max(0, (math.max(own_tat, now) - now) * own_rate + cost - own_burst)
      ready = own_ready
      if borrow_ready < own_ready and debt <= borrow_share * (1 - borrow_reserve) * burst then ready = borrow_ready end
      if ready > tat - room / rate then held = 1 end
      local asked = tonumber(mine[2]) or 0
      local asked_at = tonumber(mine[3]) or now
      if asked_at > now then asked_at = now end
      own = {tat = own_tat, rate = own_rate, cost = cost, asked = asked * math.exp((asked_at - now) / window) + cost}
    else
      ready = tat - (1 - reserve) * room / rate
    end
    if ready > go then go = ready end
    buckets[#buckets + 1] = {name, rate, cost, tat}
  end
end

if own ~= nil then
  redis.call('HSET', KEYS[4], 'd:' .. tenant, string.format('%.3f', own.asked), 'u:' .. tenant, now)
  if reserve == 0 then redis.call('HSET', KEYS[4], 'i:' .. tenant, now) end
  redis.call('PEXPIRE', KEYS[4], keep + 10 * window)
end
local wait = math.ceil(go - now)
if wait > max_wait then return {0, wait, held} end

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
if own ~= nil then
  local own_tat = math.max(own.tat, go) + own.cost / own.rate
  redis.call('HSET', KEYS[4], 'tat:' .. tenant, string.format('%.3f', own_tat), 'rate:' .. tenant, tostring(own.rate))
  redis.call('PEXPIRE', KEYS[4], math.max(math.ceil(own_tat - now), 0) + keep + 10 * window)
end
return {1, wait, held}
