package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// ErrClosed is returned by Record after Close.
var ErrClosed = errors.New("audit log is closed")

// Sink names (Config.Sinks).
const (
	SinkFile   = "file"   // JSON lines at Config.File, fsynced, rotated
	SinkStdout = "stdout" // JSON lines on standard output
	SinkOTLP   = "otlp"   // OTLP logs, configured by the standard OTEL_* variables
)

// MaxRecordBytes caps one encoded record (without its newline): the last
// line of defence against a field that grew past the bounds set where it
// was produced. A record over it is cut (Record.shrink) and marked
// truncated, never refused: the audit entry is owed.
const MaxRecordBytes = 1 << 20

// Defaults for zero Config fields.
const (
	DefaultMaxSizeMB  = 100
	DefaultMaxBackups = 10
)

// Log writes audit records to its sinks. It is safe for concurrent use.
// Every Record call has reached every sink (the file sink: written and
// fsynced) before it returns; Close releases the file and its lock.
type Log struct {
	sinks []sink
	now   func() time.Time

	mu     sync.RWMutex // guards closed against Record racing Close
	closed bool
}

// sink is one destination. write gets the encoded line (ending in '\n') and
// the record it encodes; it must be durable, or fail, before returning.
type sink interface {
	name() string
	write(ctx context.Context, line []byte, r *Record) error
	close(ctx context.Context) error
}

// New opens the sinks named by cfg.Sinks (default: file).
func New(cfg Config) (*Log, error) {
	return newLog(cfg, os.Stdout, time.Now)
}

func newLog(cfg Config, stdout io.Writer, now func() time.Time) (*Log, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	l := &Log{now: now}
	for _, name := range cfg.Sinks {
		var s sink
		var err error
		switch name {
		case SinkFile:
			s, err = openFileSink(cfg.File, int64(cfg.MaxSizeMB)<<20, cfg.MaxBackups, now)
		case SinkStdout:
			s = &writerSink{w: stdout}
		case SinkOTLP:
			s, err = newOTLPSink(context.Background())
		}
		if err != nil {
			l.closeSinks(context.Background())
			return nil, fmt.Errorf("opening audit sink %s: %w", name, err)
		}
		l.sinks = append(l.sinks, s)
	}
	return l, nil
}

// Validate reports configuration errors, each naming its key.
func (c Config) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for _, s := range c.Sinks {
		switch s {
		case SinkFile, SinkStdout, SinkOTLP:
		default:
			errs = append(errs, fmt.Errorf("audit.sinks: %q is not one of file, stdout, otlp", s))
		}
		if seen[s] {
			errs = append(errs, fmt.Errorf("audit.sinks: %q is listed twice", s))
		}
		seen[s] = true
	}
	if (len(c.Sinks) == 0 || seen[SinkFile]) && c.File == "" {
		errs = append(errs, errors.New("audit.file: required when the file sink is on"))
	}
	if c.MaxSizeMB < 0 {
		errs = append(errs, fmt.Errorf("audit.max_size_mb: %d must be >= 0", c.MaxSizeMB))
	}
	return errors.Join(errs...)
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if len(c.Sinks) == 0 {
		c.Sinks = []string{SinkFile}
	}
	c.Sinks = slices.Clone(c.Sinks)
	if c.MaxSizeMB == 0 {
		c.MaxSizeMB = DefaultMaxSizeMB
	}
	if c.MaxBackups == 0 {
		c.MaxBackups = DefaultMaxBackups
	}
	return c
}

// Record writes r to every sink and returns once it is durable. It sets
// SchemaVersion and Time when zero and TraceID/SpanID from ctx's span when
// empty, then validates (see Record.Validate): an invalid record is not
// written and the error names the field. Cancelling ctx does not skip the
// record: an audit entry is owed even when the caller went away.
func (l *Log) Record(ctx context.Context, r Record) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ErrClosed
	}
	if r.SchemaVersion == 0 {
		r.SchemaVersion = SchemaVersion
	}
	if r.Time.IsZero() {
		r.Time = l.now()
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && r.TraceID == "" && r.SpanID == "" {
		r.TraceID = sc.TraceID().String()
		r.SpanID = sc.SpanID().String()
	}
	r.normalize()
	if err := r.Validate(); err != nil {
		return err
	}
	line, err := json.Marshal(&r)
	if err != nil {
		return fmt.Errorf("encoding audit record: %w", err)
	}
	if len(line) > MaxRecordBytes {
		r.shrink()
		if line, err = json.Marshal(&r); err != nil {
			return fmt.Errorf("encoding audit record: %w", err)
		}
	}
	line = append(line, '\n')
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for _, s := range l.sinks {
		if err := s.write(ctx, line, &r); err != nil {
			errs = append(errs, fmt.Errorf("audit sink %s: %w", s.name(), err))
		}
	}
	return errors.Join(errs...)
}

// Close flushes and closes every sink. Record fails with ErrClosed afterwards.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return l.closeSinks(ctx)
}

func (l *Log) closeSinks(ctx context.Context) error {
	var errs []error
	for _, s := range l.sinks {
		if err := s.close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("closing audit sink %s: %w", s.name(), err))
		}
	}
	return errors.Join(errs...)
}

func (s *fileSink) name() string { return SinkFile }

func (s *fileSink) write(_ context.Context, line []byte, r *Record) error {
	return s.writeLine(line, r.TenantID)
}

func (s *fileSink) close(context.Context) error { return s.closeFile() }

// writerSink writes lines to a stream (stdout). Streams such as pipes cannot
// be fsynced; the line is handed to the kernel in one write before returning.
type writerSink struct {
	mu sync.Mutex // guards w, so lines never interleave
	w  io.Writer
}

func (s *writerSink) name() string { return SinkStdout }

func (s *writerSink) write(_ context.Context, line []byte, _ *Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.w.Write(line); err != nil {
		return fmt.Errorf("writing: %w", err)
	}
	return nil
}

func (s *writerSink) close(context.Context) error { return nil }
