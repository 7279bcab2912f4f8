-- enqueue.lua: take a place in a tenant's queue of dispatched, not yet
-- started runs, or refuse when it is full (max_queued).
--
-- KEYS: 1 the tenant's queued ZSET (run id → job expiry, unix ms)
-- ARGV: 1 run id, 2 its expiry (unix ms), 3 now (unix ms), 4 max_queued (>= 1)
-- Returns 1 queued, 0 refused (the queue holds max_queued live runs).
local expires, now, max = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= max then
  return 0
end
redis.call('ZADD', KEYS[1], expires, ARGV[1])
local ttl = expires - now
if ttl < 1000 then ttl = 1000 end
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
