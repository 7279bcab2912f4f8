-- admit.lua: one admission, checked as a whole, then consumed. Every key is
-- in KEYS and shares the tenant's hash tag (Cluster-safe). Time is Redis TIME.
--
-- KEYS: 1 rate (GCRA TAT, redis_rate format), 2 leases (ZSET), 3 resv (HASH),
--       4 budget (HASH), 5 settled (ZSET), 6 override (HASH)
-- ARGV: 1 execution id, 2 rate_per_minute, 3 burst, 4 concurrency,
--       5 daily_cpu_seconds (configured; the override wins), 6 reserve ms,
--       7 lease ms, 8 day shift ms (0 in production: UTC days),
--       9 max_queued (configured; the override wins; enforced by dispatch)
-- Returns {status, kind, retry_ms, reserved_ms, rate, burst, concurrency,
--          daily_cpu_seconds, max_queued, used_ms, held_ms}: status 1 admitted, 2 replayed (the id already
--          held a live lease; nothing consumed), 0 refused; kind 1 rate,
--          2 concurrency, 3 budget (the refusal with the longest retry).
--          reserved_ms is the reservation: ARGV[6], or what was left of the
--          budget when less was. used_ms and held_ms are today's settled
--          and reserved budget (set when the budget was checked).
redis.replicate_commands()

local exec = ARGV[1]
local rate, burst, conc, cpu_s = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local max_queued = tonumber(ARGV[9])
local ov = redis.call('HMGET', KEYS[6], 'rate_per_minute', 'burst', 'concurrency', 'daily_cpu_seconds', 'max_queued')
if ov[1] and ov[2] and ov[3] and ov[4] then
  rate, burst, conc, cpu_s = tonumber(ov[1]), tonumber(ov[2]), tonumber(ov[3]), tonumber(ov[4])
  max_queued = tonumber(ov[5] or '0') -- an override written before max_queued existed: unbounded
end
local reserve, lease_ms, shift = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])

local t = redis.call('TIME')
local sec, usec = tonumber(t[1]), tonumber(t[2])
local now_ms = sec * 1000 + math.floor(usec / 1000)
local key_ttl = 2 * lease_ms

-- Reclaim expired leases (a crashed gateway's) with their reservations.
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now_ms)
if #expired > 0 then
  for i = 1, #expired do
    redis.call('HDEL', KEYS[3], expired[i])
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
end

-- Idempotent: a live lease for this id is the same admission.
if redis.call('ZSCORE', KEYS[2], exec) then
  redis.call('ZADD', KEYS[2], 'XX', now_ms + lease_ms, exec)
  redis.call('PEXPIRE', KEYS[2], key_ttl)
  local r = tonumber(redis.call('HGET', KEYS[3], exec) or '0')
  if r > 0 then
    redis.call('PEXPIRE', KEYS[3], key_ttl)
  end
  return {2, 0, 0, r, rate, burst, conc, cpu_s, max_queued, 0, 0}
end

local kind, retry = 0, 0
local function refuse(k, r)
  if r < 1 then r = 1 end
  if kind == 0 or r > retry then
    kind, retry = k, r
  end
end

-- Rate: GCRA as redis_rate computes it (seconds since 2017-01-01 as a float).
local now_s, new_tat
if rate > 0 then
  now_s = (sec - 1483228800) + usec / 1000000
  local ei = 60 / rate
  local tat = tonumber(redis.call('GET', KEYS[1]) or now_s)
  if tat < now_s then tat = now_s end
  new_tat = tat + ei
  local diff = now_s - (new_tat - ei * burst)
  if diff < 0 then
    refuse(1, math.ceil(-diff * 1000))
  end
end

-- Concurrency: live leases.
if conc > 0 then
  local running = redis.call('ZCARD', KEYS[2])
  if running >= conc then
    local r = 1000
    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    local d = tonumber(first[2]) - now_ms
    if d < r then r = d end
    refuse(2, r)
  end
end

-- Budget: what today's settled usage and the live reservations leave.
-- A run reserves at most that (its cpu_ms is cut to it); it is refused
-- only when nothing is left.
local used, reserved = 0, 0
if cpu_s > 0 then
  local limit = cpu_s * 1000
  local day = math.floor((now_ms + shift) / 86400000)
  local b = redis.call('HMGET', KEYS[4], 'day', 'used_ms')
  if tonumber(b[1]) == day then used = tonumber(b[2]) or 0 end
  local vals = redis.call('HVALS', KEYS[3])
  for i = 1, #vals do reserved = reserved + tonumber(vals[i]) end
  local left = limit - used - reserved
  if used >= limit or (reserve > 0 and left <= 0) then
    local r = (day + 1) * 86400000 - shift - now_ms
    if used < limit and r > 1000 then r = 1000 end -- the rest is reserved by runs in flight: it comes back as they settle
    refuse(3, r)
  elseif reserve > left then
    reserve = left
  end
end

if kind ~= 0 then
  return {0, kind, retry, 0, rate, burst, conc, cpu_s, max_queued, used, reserved}
end

-- Consume.
if rate > 0 then
  redis.call('SET', KEYS[1], string.format('%.6f', new_tat), 'EX', math.ceil(new_tat - now_s))
end
redis.call('ZADD', KEYS[2], now_ms + lease_ms, exec)
redis.call('PEXPIRE', KEYS[2], key_ttl)
if reserve > 0 then
  redis.call('HSET', KEYS[3], exec, reserve)
  redis.call('PEXPIRE', KEYS[3], key_ttl)
end
redis.call('ZREM', KEYS[5], exec)
return {1, 0, 0, reserve, rate, burst, conc, cpu_s, max_queued, used, reserved}
