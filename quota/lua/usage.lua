-- usage.lua: the admin usage report (reads only).
-- KEYS: 1 leases (ZSET), 2 resv (HASH), 3 budget (HASH), 4 override (HASH)
-- ARGV: 1 rate_per_minute, 2 burst, 3 concurrency, 4 daily_cpu_seconds
--       (configured; the override wins), 5 day shift ms
-- Returns {rate, burst, concurrency, daily_cpu_seconds, running,
--          reserved_ms, used_ms, resets_at_ms}.
local rate, burst, conc, cpu_s = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local ov = redis.call('HMGET', KEYS[4], 'rate_per_minute', 'burst', 'concurrency', 'daily_cpu_seconds')
if ov[1] and ov[2] and ov[3] and ov[4] then
  rate, burst, conc, cpu_s = tonumber(ov[1]), tonumber(ov[2]), tonumber(ov[3]), tonumber(ov[4])
end
local shift = tonumber(ARGV[5])
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf')
local reserved = 0
for i = 1, #live do
  reserved = reserved + tonumber(redis.call('HGET', KEYS[2], live[i]) or '0')
end
local day = math.floor((now_ms + shift) / 86400000)
local b = redis.call('HMGET', KEYS[3], 'day', 'used_ms')
local used = 0
if tonumber(b[1]) == day then used = tonumber(b[2]) or 0 end
return {rate, burst, conc, cpu_s, #live, reserved, used, (day + 1) * 86400000 - shift}
