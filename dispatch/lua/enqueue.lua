-- enqueue.lua: take a place in a tenant's queue of dispatched, not yet
-- started runs, or refuse when it is full (max_queued). Time is Redis TIME,
-- so gateways with skewed clocks share one bound.
--
-- KEYS: 1 the tenant's queued ZSET (run id → when its place lapses, unix ms)
-- ARGV: 1 run id, 2 how long its place lasts (ms: the queue timeout),
--       3 max_queued (>= 1)
-- Returns 1 queued, 0 refused (the queue holds max_queued live runs).
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl, max = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= max then
  return 0
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
