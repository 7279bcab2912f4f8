package gateway

import (
	"context"
	"encoding/json"
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
// backlog and a reader too slow for it skips ahead (dropped).

// eventStreamWanted says the caller asked for Server-Sent Events.
func eventStreamWanted(c *gin.Context) bool {
	return strings.Contains(c.GetHeader("Accept"), "text/event-stream")
}

// sseWriter writes Server-Sent Events to the response.
type sseWriter struct {
	c       *gin.Context
	started bool
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

// event writes one event; data must hold no newline (JSON).
func (w *sseWriter) event(id int64, kind string, data []byte) error {
	w.start()
	b := make([]byte, 0, len(data)+len(kind)+32)
	if id >= 0 {
		b = append(append(append(b, "id: "...), strconv.FormatInt(id, 10)...), '\n')
	}
	b = append(append(append(b, "event: "...), kind...), '\n')
	b = append(append(append(b, "data: "...), data...), "\n\n"...)
	_, err := w.c.Writer.Write(b)
	return err
}

func (w *sseWriter) flush() { w.c.Writer.Flush() }

// eventData is what an event of a stream carries on the wire.
func eventData(e async.Event) []byte {
	switch e.Kind {
	case async.EventStdout, async.EventStderr:
		b, _ := json.Marshal(struct {
			Text string `json:"text"`
		}{string(e.Data)}) // invalid UTF-8 becomes U+FFFD
		return b
	}
	return e.Data
}

// pump writes st's events from seq from on until it ends or the caller
// goes away.
func (w *sseWriter) pump(ctx context.Context, st *async.Stream, from int64) {
	for {
		evs, skipped, closed, err := st.Next(ctx, from)
		if err != nil {
			return
		}
		if skipped > 0 {
			_ = w.event(-1, "dropped", []byte(`{"events":`+strconv.FormatInt(skipped, 10)+`}`))
		}
		for _, e := range evs {
			if w.event(e.Seq, e.Kind, eventData(e)) != nil {
				return
			}
			from = e.Seq + 1
		}
		w.flush()
		if closed {
			return
		}
	}
}

// ended writes the end of a run known only from the store: its log lines
// and its envelope.
func (w *sseWriter) ended(envelope []byte) {
	for _, l := range async.EnvelopeLogs(envelope) {
		_ = w.event(-1, async.EventLog, l)
	}
	_ = w.event(-1, async.EventEnvelope, envelope)
	w.flush()
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
// or it is done) its end once the store has it.
func (s *Server) handleExecutionEvents(c *gin.Context) {
	k, rec, ok := s.execution(c, s.runs.Store().Get)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	w := &sseWriter{c: c}
	if st, live := s.runs.Watch(k); live {
		w.pump(ctx, st, lastEventID(c)+1)
		return
	}
	w.start()
	w.flush()
	t := time.NewTicker(asyncCancelPoll)
	defer t.Stop()
	for rec.State != async.StateDone {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		if rec, ok, err = s.runs.Store().Get(ctx, k); err != nil || !ok {
			return // the stream ends without an envelope: read GET
		}
	}
	if rec.Expired {
		return
	}
	w.ended(rec.Envelope)
}

// executeEvents is POST /v1/execute for a caller that accepts
// text/event-stream: the same flow, its output as it happens, the envelope
// last. The response is 200 whatever the envelope says (its error.type
// tells a refusal); refusals before the flow (authentication) stay JSON.
func (s *Server) executeEvents(c *gin.Context) {
	p, _ := tenancy.PrincipalFrom(c.Request.Context())
	a, _ := c.Value(keyAccess).(Access)
	body, err := readBody(c.Request, c.Writer, s.caps.body)
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
	w := &sseWriter{c: c}
	w.pump(c.Request.Context(), st, 0)
	out := <-outc // the flow ends with the request at the latest
	out.Release()
	c.Set(keyExecutionID, out.Envelope.ExecutionID)
}
