-- GCRA in Redis Lua, the way people rate limit without a module: the same
-- arithmetic and reply as redis-cell's CL.THROTTLE (and sluice's).
--
--   EVALSHA <sha> 1 <key> <max_burst> <count> <period_s> [<quantity>]
--   -> {limited, limit, remaining, retry_after_s, reset_after_s}
--
-- The key holds the theoretical arrival time (TAT) in microseconds.  Redis 7
-- replicates script effects, so reading TIME before writing is allowed.
local burst = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local quantity = tonumber(ARGV[4] or "1")
if burst == nil or count == nil or period == nil or quantity == nil then
  return redis.error_reply("ERR arguments must be integers")
end
if count <= 0 or period <= 0 then
  return redis.error_reply("ERR zero rates are not supported")
end

local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local emission = math.floor(period * 1000000 / count)
local tolerance = emission * (burst + 1)
local increment = emission * quantity

local tat = tonumber(redis.call("GET", KEYS[1]) or now)
if tat < now then
  tat = now
end
local new_tat = tat + increment
local diff = now - (new_tat - tolerance)

local limited, retry_after, ttl
if diff < 0 then
  limited = 1
  retry_after = -1
  if increment <= tolerance then
    retry_after = math.ceil(-diff / 1000000)
  end
  ttl = tat - now
else
  limited = 0
  retry_after = -1
  ttl = new_tat - now
  redis.call("SET", KEYS[1], string.format("%d", new_tat), "PX", math.max(1, math.ceil(ttl / 1000)))
end

local remaining = 0
local next_free = tolerance - ttl
if next_free > -emission then
  remaining = math.floor(next_free / emission)
end
return {limited, burst + 1, remaining, retry_after, math.ceil(ttl / 1000000)}
