-- heartbeat.lua: extend a live lease (and its reservation); report a lost one.
-- KEYS: 1 leases (ZSET), 2 resv (HASH)
-- ARGV: 1 execution id, 2 lease ms
-- Returns 1 alive, 0 lost.
redis.replicate_commands()

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease_ms = tonumber(ARGV[2])

local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) <= now_ms then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now_ms + lease_ms, ARGV[1])
redis.call('PEXPIRE', KEYS[1], 2 * lease_ms)
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[2], 2 * lease_ms)
end
return 1
