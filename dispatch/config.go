package dispatch

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Config is the dispatch.* section: how gateways and executors meet in
// Redis. Only the gateway and executor roles use it (server.role all runs
// in-process and ignores it).
type Config struct {
	// RedisURL is the Redis the runs travel through
	// (redis://[user:password@]host:port[/db]). Empty: quota.redis_url.
	// A single node (Sentinel and cluster URLs are not supported yet).
	RedisURL string `yaml:"redis_url" json:"redis_url"`
	// SpecKeyFile holds the HMAC-SHA256 key (at least 32 bytes, one line;
	// hex or raw) shared by gateways and executors: gateways sign the
	// decided runs with it, executors refuse what it does not verify.
	// Required for the gateway and executor roles.
	SpecKeyFile string `yaml:"spec_key_file" json:"spec_key_file"`
	// KeyPrefix starts every dispatch key. Empty: quota.key_prefix
	// ("execgate").
	KeyPrefix string `yaml:"key_prefix" json:"key_prefix"`
	// QueueTimeoutMS: a run no executor has started within it is never
	// started (the request gets 503 SandboxUnavailable). Default 30000.
	QueueTimeoutMS int `yaml:"queue_timeout_ms" json:"queue_timeout_ms"`
	// HeartbeatMS is how often an executor renews its heartbeat; it is
	// dead (its started runs end ExecutorLost, its unstarted entries are
	// claimed by others) after 3 missed beats. Default 1000.
	HeartbeatMS int `yaml:"heartbeat_ms" json:"heartbeat_ms"`
	// MaxStreamLength bounds the run stream (MAXLEN ~); runs trimmed
	// before any executor read them are never started. Default 10000.
	MaxStreamLength int64 `yaml:"max_stream_length" json:"max_stream_length"`
	// ExecutorID names this executor in heartbeats, logs and the started
	// markers. Empty: hostname-pid-random.
	ExecutorID string `yaml:"executor_id" json:"executor_id"`
}

// Defaults for zero fields.
const (
	DefaultQueueTimeoutMS  = 30000
	DefaultHeartbeatMS     = 1000
	DefaultMaxStreamLength = 10000
	minKeyBytes            = 32
)

// WithDefaults fills the zero fields (not RedisURL and KeyPrefix, which
// default to the quota section's: config does that).
func (c Config) WithDefaults() Config {
	if c.QueueTimeoutMS == 0 {
		c.QueueTimeoutMS = DefaultQueueTimeoutMS
	}
	if c.HeartbeatMS == 0 {
		c.HeartbeatMS = DefaultHeartbeatMS
	}
	if c.MaxStreamLength == 0 {
		c.MaxStreamLength = DefaultMaxStreamLength
	}
	return c
}

// Validate checks the section for a role that dispatches (gateway,
// executor).
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if c.RedisURL == "" {
		errs = append(errs, errors.New("dispatch.redis_url: required for server.role gateway or executor (or set quota.redis_url)"))
	}
	if c.SpecKeyFile == "" {
		errs = append(errs, errors.New("dispatch.spec_key_file: required for server.role gateway or executor"))
	}
	if c.QueueTimeoutMS < 100 || c.QueueTimeoutMS > 3600_000 {
		errs = append(errs, fmt.Errorf("dispatch.queue_timeout_ms: %d is outside 100..3600000", c.QueueTimeoutMS))
	}
	if c.HeartbeatMS < 50 || c.HeartbeatMS > 60_000 {
		errs = append(errs, fmt.Errorf("dispatch.heartbeat_ms: %d is outside 50..60000", c.HeartbeatMS))
	}
	if c.MaxStreamLength < 1 {
		errs = append(errs, fmt.Errorf("dispatch.max_stream_length: %d must be >= 1", c.MaxStreamLength))
	}
	if len(c.ExecutorID) > maxIDBytes || strings.ContainsAny(c.ExecutorID, " \t\n{}") {
		errs = append(errs, fmt.Errorf("dispatch.executor_id: at most %d bytes, no spaces or braces", maxIDBytes))
	}
	return errors.Join(errs...)
}

func (c Config) heartbeat() time.Duration { return time.Duration(c.HeartbeatMS) * time.Millisecond }

// deadAfter is how long an executor lives without a beat.
func (c Config) deadAfter() time.Duration { return 3 * c.heartbeat() }

// LoadKey reads the spec key from path: a line of hex (decoded) or raw
// bytes, at least 32 bytes either way.
func LoadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("dispatch.spec_key_file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	key := []byte(s)
	if dec, err := decodeHex(s); err == nil {
		key = dec
	}
	if len(key) < minKeyBytes {
		return nil, fmt.Errorf("dispatch.spec_key_file: the key has %d bytes, want at least %d", len(key), minKeyBytes)
	}
	return key, nil
}
