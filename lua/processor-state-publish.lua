-- Replaces one processor's entry in the processor-state hash and drops every entry whose processor
-- stopped publishing, so that a reader finds only live processors' state. An entry holds, per
-- scope, when that processor's longest waiter began to wait, on this server's clock: the
-- publisher sends how long it has waited, so no two hosts' clocks are ever compared. Its paused
-- partitions and held runs are stored as the publisher gives them. The hash expires with its
-- latest-lapsing entry, so nothing is left once every processor is gone.
-- KEYS[1] processor-state hash (instance -> JSON {until = ms, since = {scope = ms}, paused = ..., held = ...})
-- ARGV[1] instance   ARGV[2] how long the entry lives unless published again, ms
-- ARGV[3] JSON object: the rest of the entry (paused, held; each left out when it has nothing)
-- ARGV[4..] pairs of scope, ms its oldest waiter has waited
-- An entry with nothing in it (no pair, ARGV[3] '{}') removes the instance's entry instead.
-- Returns how many entries are live after the call
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local instance = ARGV[1]

local live = 0
local latest = 0
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  if fields[i] ~= instance then
    local ok, entry = pcall(cjson.decode, fields[i + 1])
    local lapse = ok and type(entry) == 'table' and tonumber(entry['until']) or 0
    if lapse > now then
      live = live + 1
      latest = math.max(latest, lapse)
    else
      redis.call('HDEL', KEYS[1], fields[i])
    end
  end
end

local entry = cjson.decode(ARGV[3])
if #ARGV > 3 or next(entry) ~= nil then
  local since = {}
  for i = 4, #ARGV, 2 do since[ARGV[i]] = now - tonumber(ARGV[i + 1]) end
  local lapse = now + tonumber(ARGV[2])
  entry['until'] = lapse
  entry.since = since
  redis.call('HSET', KEYS[1], instance, cjson.encode(entry))
  live = live + 1
  latest = math.max(latest, lapse)
else
  redis.call('HDEL', KEYS[1], instance)
end

if live > 0 then redis.call('PEXPIREAT', KEYS[1], latest) end
return live
