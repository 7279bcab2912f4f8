-- finish.lua: settle (charge the measured CPU) or release an admission.
-- Idempotent: a finished id is remembered in the settled ZSET for a while.
-- KEYS: 1 leases (ZSET), 2 resv (HASH), 3 budget (HASH), 4 settled (ZSET)
-- ARGV: 1 execution id, 2 cpu ms, 3 settle (1) or release (0),
--       4 day shift ms, 5 settled marker retention ms
-- Returns 1 done, 0 already done.
redis.replicate_commands()

local exec = ARGV[1]
local cpu, settle, shift, retention = tonumber(ARGV[2]), ARGV[3] == '1', tonumber(ARGV[4]), tonumber(ARGV[5])
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now_ms)
if redis.call('ZSCORE', KEYS[4], exec) then
  return 0
end
redis.call('ZREM', KEYS[1], exec)
redis.call('HDEL', KEYS[2], exec)
if settle then
  local day = math.floor((now_ms + shift) / 86400000)
  if tonumber(redis.call('HGET', KEYS[3], 'day')) == day then
    redis.call('HINCRBY', KEYS[3], 'used_ms', cpu)
  else
    redis.call('HSET', KEYS[3], 'day', day, 'used_ms', cpu)
  end
  -- Keep the day's record an hour past its reset for late usage reports.
  redis.call('PEXPIRE', KEYS[3], (day + 1) * 86400000 - shift - now_ms + 3600000)
end
redis.call('ZADD', KEYS[4], now_ms + retention, exec)
redis.call('PEXPIRE', KEYS[4], retention)
return 1
