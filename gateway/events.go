package gateway

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/execution/async"
	"github.com/execgate/execgate/tenancy"
)

// Live output as Server-Sent Events (issue #15): GET
// /v1/executions/{id}/events, and POST /v1/execute with Accept:
// text/event-stream. Events, in order:
//
//	event: stdout | stderr   data: {"text": "<chunk>"}   as the run writes it
//	event: dropped           data: {"events": N}         N events this reader fell behind on
//	event: log               data: {"level", "message"}  the run's log lines, at its end
//	event: envelope          data: <the envelope>        last; then the stream ends
//
// Every event has an id (its sequence number); a reader that reconnects
// with Last-Event-ID continues after it while the run is live on this
// gateway. A reader never slows the run: the run's stream holds a bounded
// backlog and a reader too slow for it skips ahead (dropped); a reader
// that stops taking writes is cut off (sseWriter), and each tenant may
// have a bounded number of readers at once (readers.go).

// eventStreamWanted says the caller asked for Server-Sent Events.
func eventStreamWanted(c *gin.Context) bool {
	return strings.Contains(c.GetHeader("Accept"), "text/event-stream")
}

// sseWriter writes Server-Sent Events to the response. Every write
// (a batch of events, then a flush) must be taken by the client within
// writeGrace plus its size at minWriteRate, and all of them within the
// exchange's write_timeout; a reader that does not is cut off (its
// connection closed) and lets go of what it held.
type sseWriter struct {
	c       *gin.Context
	rc      *http.ResponseController
	end     time.Time // no write deadline beyond it (server.write_timeout_seconds)
	started bool
	head    []byte // the current event's id and event lines, reused
}

func (s *Server) newSSEWriter(c *gin.Context) *sseWriter {
	return &sseWriter{c: c, rc: http.NewResponseController(c.Writer),
		end: time.Now().Add(time.Duration(s.cfg.WriteTimeoutSeconds) * time.Second)}
}

func (w *sseWriter) start() {
	if w.started {
		return
	}
	w.started = true
	h := w.c.Writer.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.c.Status(http.StatusOK)
	w.c.Writer.WriteHeaderNow()
}

// sseFraming is what an event adds to its data, at most (id, event name,
// field names, newlines).
const sseFraming = 64

// deadline bounds the next write, of about size bytes.
func (w *sseWriter) deadline(size int) {
	d := writeDeadline(size)
	if d.After(w.end) {
		d = w.end
	}
	_ = w.rc.SetWriteDeadline(d)
}

// event writes one event; data must hold no newline (JSON). data is
// written as it is, never copied.
func (w *sseWriter) event(id int64, kind string, data []byte) error {
	w.start()
	b := w.head[:0]
	if id >= 0 {
		b = append(append(append(b, "id: "...), strconv.FormatInt(id, 10)...), '\n')
	}
	b = append(append(append(b, "event: "...), kind...), '\n')
	b = append(b, "data: "...)
	w.head = b
	for _, p := range [][]byte{b, data, []byte("\n\n")} {
		if _, err := w.c.Writer.Write(p); err != nil {
			return err
		}
	}
	return nil
}

func (w *sseWriter) flush() error {
	w.start()
	return w.rc.Flush()
}

// sseBatchBytes bounds the events a live reader takes from its stream at
// a time: what it may hold of events the stream has since dropped.
const sseBatchBytes = 256 << 10

// pump writes st's events from seq from on until it ends, the caller goes
// away or does not keep up.
func (w *sseWriter) pump(ctx context.Context, st *async.Stream, from int64) {
	w.deadline(sseFraming)
	if w.flush() != nil { // the head at once: the reader knows it is connected
		return
	}
	for {
		evs, skipped, closed, err := st.Next(ctx, from, sseBatchBytes)
		if err != nil {
			return
		}
		size := sseFraming
		for _, e := range evs {
			size += len(e.Data) + sseFraming
		}
		w.deadline(size)
		if skipped > 0 {
			if w.event(-1, "dropped", []byte(`{"events":`+strconv.FormatInt(skipped, 10)+`}`)) != nil {
				return
			}
		}
		for _, e := range evs {
			if w.event(e.Seq, e.Kind, e.Data) != nil {
				return
			}
			from = e.Seq + 1
		}
		if w.flush() != nil || closed {
			return
		}
	}
}

// ended writes the end of a run known only from the store: its log lines
// and its envelope.
func (w *sseWriter) ended(envelope []byte) {
	logs := async.EnvelopeLogs(envelope)
	size := len(envelope) + sseFraming
	for _, l := range logs {
		size += len(l) + sseFraming
	}
	w.deadline(size)
	for _, l := range logs {
		if w.event(-1, async.EventLog, l) != nil {
			return
		}
	}
	if w.event(-1, async.EventEnvelope, envelope) == nil {
		_ = w.flush()
	}
}

// lastEventID is the Last-Event-ID of a reconnecting reader (-1: none).
func lastEventID(c *gin.Context) int64 {
	n, err := strconv.ParseInt(c.GetHeader("Last-Event-ID"), 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// handleExecutionEvents is GET /v1/executions/{id}/events: the live output
// when this gateway runs the execution; otherwise (another replica runs it,
// or it is done) its end once the store has it. A stream of an unfinished
// execution is one of the tenant's server.tenant_max_live_readers, that of
// a finished one one of its server.tenant_max_result_readers (readers.go).
func (s *Server) handleExecutionEvents(c *gin.Context) {
	k, err := s.executionKey(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	store := s.runs.Store()
	rec, ok := s.lookup(c, k, store.Head)
	if !ok {
		return
	}
	slots, what := s.liveReaders, whatLiveReaders
	if rec.State == async.StateDone {
		slots, what = s.resultReaders, whatResultReaders
	}
	done, err := slots.take(k.TenantID, what)
	if err != nil {
		s.fail(c, err)
		return
	}
	defer done()
	ctx := c.Request.Context()
	w := s.newSSEWriter(c)
	if st, live := s.runs.Watch(k); live {
		w.pump(ctx, st, lastEventID(c)+1)
		return
	}
	if rec.State != async.StateDone {
		w.deadline(sseFraming)
		if w.flush() != nil {
			return
		}
	}
	t := time.NewTicker(asyncCancelPoll)
	defer t.Stop()
	for rec.State != async.StateDone {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if rec, ok, err = store.Head(ctx, k); err != nil || !ok {
			return // the stream ends without an envelope: read GET
		}
	}
	if rec.Expired {
		if !w.started {
			s.fail(c, errResultExpired)
		}
		return
	}
	if !w.started { // not streaming yet: a refusal can still be JSON
		env, release, ok := s.storedEnvelope(c, rec)
		if !ok {
			return
		}
		defer release()
		w.ended(env)
		return
	}
	env, release, ok, err := store.Envelope(ctx, k, s.flow.ReserveOutput)
	if err != nil || !ok {
		return
	}
	defer release()
	w.ended(env)
}

// executeEvents is POST /v1/execute for a caller that accepts
// text/event-stream: the same flow, its output as it happens, the envelope
// last. The response is 200 whatever the envelope says (its error.type
// tells a refusal); refusals before the flow (authentication) stay JSON.
func (s *Server) executeEvents(c *gin.Context) {
	p, _ := tenancy.PrincipalFrom(c.Request.Context())
	a, _ := c.Value(keyAccess).(Access)
	body, err := readBody(c.Request, c.Writer, s.caps.Body)
	id := c.GetString(keyExecutionID)
	if err == nil { // the headers go first: name the request's id (the flow decodes it again)
		if req, derr := s.decodeExecute(body); derr == nil && req.ExecutionID != "" {
			id = req.ExecutionID
		}
	}
	st := async.NewStream(async.DefaultStreamBytes)
	outc := make(chan *execution.Outcome, 1)
	go func() {
		out := s.flow.Run(c.Request.Context(), execution.Call{
			Principal: p, Grants: a.Grants, ID: c.GetString(keyExecutionID),
			Body:   func() ([]byte, error) { return body, err },
			Decode: s.decodeExecute, Output: st.Output,
		})
		st.End(out.Body.Bytes())
		outc <- out
	}()
	c.Header("X-Execution-Id", id)
	w := s.newSSEWriter(c)
	w.pump(c.Request.Context(), st, 0)
	out := <-outc // the flow ends with the request at the latest
	out.Release()
	c.Set(keyExecutionID, out.Envelope.ExecutionID)
}
