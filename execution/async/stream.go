package async

import (
	"context"
	"encoding/json"
	"sync"
)

// The kinds of Event, as Server-Sent Events names them.
const (
	EventStdout   = "stdout"
	EventStderr   = "stderr"
	EventLog      = "log"
	EventEnvelope = "envelope"
)

// Event is one piece of a run's live output.
type Event struct {
	Seq  int64  // 0, 1, 2, … per stream
	Kind string // EventStdout, EventStderr, EventLog or EventEnvelope
	// Data is the event's JSON as it goes on the wire, encoded once for
	// every reader: {"text": chunk} (stdout, stderr), the log line, the
	// envelope. Readers share it and must not modify it.
	Data []byte
}

// DefaultStreamBytes bounds what a Stream holds for its readers.
const DefaultStreamBytes = 1 << 20

// Stream is a run's live output for any number of readers. The run
// publishes without ever waiting: a Stream holds at most its byte bound,
// dropping its oldest events for new ones, and a reader that fell behind
// learns how many events it missed (Next's skipped). Every event is
// encoded once, when published, and its bytes are shared by all readers:
// a reader costs no copy of the output, however many there are. Publish,
// Output and Close are safe to call concurrently with the readers.
type Stream struct {
	max int

	mu     sync.Mutex // guards everything below
	events []Event    // held, oldest first; events[i].Seq == first+i
	first  int64
	bytes  int
	closed bool
	wake   chan struct{} // closed (and replaced) on every Publish and on Close
}

// NewStream returns an open Stream holding at most maxBytes of events
// (<= 0: DefaultStreamBytes).
func NewStream(maxBytes int) *Stream {
	if maxBytes <= 0 {
		maxBytes = DefaultStreamBytes
	}
	return &Stream{max: maxBytes, wake: make(chan struct{})}
}

// Output is a sandbox.OutputFunc publishing stdout and stderr chunks as
// {"text": chunk} (invalid UTF-8 becomes U+FFFD).
func (s *Stream) Output(stream string, p []byte) {
	b, _ := json.Marshal(struct {
		Text string `json:"text"`
	}{string(p)})
	s.Publish(stream, b)
}

// Publish appends an event of kind with data (kept as is: the caller
// gives it up). The newest event is always held, even one larger than the
// bound (an envelope: bounded by the run's output caps). After Close it
// does nothing.
func (s *Stream) Publish(kind string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.events = append(s.events, Event{Seq: s.first + int64(len(s.events)), Kind: kind, Data: data})
	s.bytes += len(data)
	drop := 0
	for s.bytes > s.max && drop < len(s.events)-1 {
		s.bytes -= len(s.events[drop].Data)
		drop++
	}
	if drop > 0 {
		s.events = append(s.events[:0:0], s.events[drop:]...)
		s.first += int64(drop)
	}
	close(s.wake)
	s.wake = make(chan struct{})
}

// Close ends the stream: readers get what is held, then closed.
func (s *Stream) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.wake)
	}
}

// Next returns held events from seq from on, waiting while there are
// none and the stream is open: as many as fit in maxBytes of Data, and at
// least one (maxBytes <= 0: all held), so what a reader holds while it
// writes them is bounded, whatever the stream drops meanwhile. skipped
// counts the events from `from` on that were dropped before this reader
// got them; closed says the stream ended and nothing more will come after
// evs (only when evs reach the end). The error is ctx's.
func (s *Stream) Next(ctx context.Context, from int64, maxBytes int) (evs []Event, skipped int64, closed bool, err error) {
	for {
		s.mu.Lock()
		if from < s.first {
			skipped, from = s.first-from, s.first
		}
		if i := from - s.first; i < int64(len(s.events)) || s.closed {
			var held []Event
			if i < int64(len(s.events)) {
				held = s.events[i:]
			}
			n := 0
			for len(held) > 0 && (len(evs) == 0 || maxBytes <= 0 || n+len(held[0].Data) <= maxBytes) {
				n += len(held[0].Data)
				evs, held = append(evs, held[0]), held[1:]
			}
			closed = s.closed && len(held) == 0
			s.mu.Unlock()
			return evs, skipped, closed, nil
		}
		wake := s.wake
		s.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, skipped, false, ctx.Err()
		}
	}
}

// End publishes the end of a run — its log lines (the envelope's logs:
// the harness reports them with the result, not as they happen), then the
// envelope — and closes the stream.
func (s *Stream) End(envelope []byte) {
	for _, l := range EnvelopeLogs(envelope) {
		s.Publish(EventLog, l)
	}
	s.Publish(EventEnvelope, envelope)
	s.Close()
}

// EnvelopeLogs are the encoded log lines of an encoded envelope (none when
// it has none or does not decode).
func EnvelopeLogs(envelope []byte) []json.RawMessage {
	var env struct {
		Logs []json.RawMessage `json:"logs"`
	}
	_ = json.Unmarshal(envelope, &env)
	return env.Logs
}
