package quota

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
)

// NewRedisClient builds the Redis client cfg describes:
//
//   - RedisURL with RedisCluster: a Cluster client (redis.ParseClusterURL);
//   - RedisURL with MasterName or ?master_name=: a Sentinel failover client;
//   - RedisURL alone: one standalone server;
//   - RedisAddrs: redis.NewUniversalClient (Sentinel with MasterName,
//     Cluster with RedisCluster or several addresses, else standalone),
//     with the password from RedisPasswordFile.
//
// Dial, read and write time out after TimeoutMS; a command is retried once.
// Tracing goes through redisotel with db.statement recording off, so
// command arguments never reach traces.
func NewRedisClient(cfg Config) (redis.UniversalClient, error) {
	cfg = cfg.WithDefaults()
	return newRedisClient(cfg, time.Duration(cfg.TimeoutMS)*time.Millisecond, false)
}

// NewRedisBulkClient is NewRedisClient for the commands that move large
// values (stored envelopes and artifacts, idempotent responses: tens of
// MiB): it dials within TimeoutMS too, but each of its reads and writes
// (a whole reply or request) may take BulkTimeoutMS. Under TimeoutMS, a
// healthy Redis on a loaded host could not hand over a 64 MiB envelope
// in time, and the reader got 503 QuotaUnavailable.
func NewRedisBulkClient(cfg Config) (redis.UniversalClient, error) {
	cfg = cfg.WithDefaults()
	return newRedisClient(cfg, time.Duration(cfg.BulkTimeoutMS)*time.Millisecond, true)
}

// newRedisClient is NewRedisClient with reads and writes bounded by rw:
// by at least rw for the bulk client (bulk), whose reads and writes a
// shorter read_timeout or write_timeout in the URL (meant for admission)
// would otherwise cut short.
func newRedisClient(cfg Config, rw time.Duration, bulk bool) (redis.UniversalClient, error) {
	timeout := time.Duration(cfg.TimeoutMS) * time.Millisecond
	var client redis.UniversalClient
	switch {
	case cfg.RedisURL != "":
		u, err := url.Parse(cfg.RedisURL)
		if err != nil {
			// url's error repeats the URL, password included.
			return nil, errors.New("quota.redis_url: not a valid URL (want redis://[user:password@]host:port[/db])")
		}
		switch {
		case cfg.RedisCluster:
			o, err := redis.ParseClusterURL(cfg.RedisURL)
			if err != nil {
				return nil, fmt.Errorf("quota.redis_url: %s", scrub(err, u))
			}
			tune(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.DialerRetries, timeout, rw, bulk)
			client = redis.NewClusterClient(o)
		case cfg.MasterName != "" || u.Query().Has("master_name"):
			o, err := redis.ParseFailoverURL(cfg.RedisURL)
			if err != nil {
				return nil, fmt.Errorf("quota.redis_url: %s", scrub(err, u))
			}
			if cfg.MasterName != "" {
				o.MasterName = cfg.MasterName
			}
			tune(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.DialerRetries, timeout, rw, bulk)
			client = redis.NewFailoverClient(o)
		default:
			o, err := redis.ParseURL(cfg.RedisURL)
			if err != nil {
				return nil, fmt.Errorf("quota.redis_url: %s", scrub(err, u))
			}
			tune(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.DialerRetries, timeout, rw, bulk)
			client = redis.NewClient(o)
		}
	case len(cfg.RedisAddrs) > 0:
		o := &redis.UniversalOptions{
			Addrs:         cfg.RedisAddrs,
			MasterName:    cfg.MasterName,
			IsClusterMode: cfg.RedisCluster,
		}
		if cfg.RedisPasswordFile != "" {
			b, err := os.ReadFile(cfg.RedisPasswordFile)
			if err != nil {
				return nil, fmt.Errorf("quota.redis_password_file: %w", err)
			}
			pw := strings.TrimSuffix(string(b), "\n")
			o.Password, o.SentinelPassword = pw, pw
		}
		tune(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.DialerRetries, timeout, rw, bulk)
		client = redis.NewUniversalClient(o)
	default:
		return nil, errors.New("quota.redis_url: required for the redis backend (or quota.redis_addrs)")
	}
	if err := redisotel.InstrumentTracing(client, redisotel.WithDBStatement(false)); err != nil {
		client.Close()
		return nil, fmt.Errorf("instrumenting redis tracing: %w", err)
	}
	return client, nil
}

// tune applies our timeouts where the URL set none (d to dials, rw to
// reads and writes; with atLeast, rw also replaces a shorter one): fail
// fast, retry a command once (the scripts are idempotent), dial once per
// attempt (go-redis' pool stops dialling a dead server and probes it in
// the background, which is how the limiter recovers).
func tune(dial, read, write *time.Duration, maxRetries, dialerRetries *int, d, rw time.Duration, atLeast bool) {
	if *dial == 0 {
		*dial = d
	}
	for _, p := range []*time.Duration{read, write} {
		// 0: unset (go-redis would take 3 s); -1 and -2: no deadline.
		if *p == 0 || (atLeast && *p > 0 && *p < rw) {
			*p = rw
		}
	}
	if *maxRetries == 0 {
		*maxRetries = 1
	}
	if *dialerRetries == 0 {
		*dialerRetries = 1
	}
}

// scrub removes the URL's password from a parse error.
func scrub(err error, u *url.URL) string {
	s := err.Error()
	if pw, ok := u.User.Password(); ok && pw != "" {
		s = strings.ReplaceAll(s, pw, "REDACTED")
	}
	return s
}
