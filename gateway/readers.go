package gateway

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/execution/async"
	"github.com/execgate/execgate/internal/slots"
)

// Readers of async executions (issue #23 §1, §6). A stored result may be
// tens of MiB and any number of requests may read it, or follow a run's
// live output, without reading their responses. Three rules bound what
// they cost this process:
//
//   - No copy per reader. GET /v1/executions/{id} writes the status head
//     and then the stored envelope's own bytes (writeExecution); readers of
//     one result share one copy (async.Store.Envelope: the memory store's
//     kept bytes, or one copy out of Redis reserved in the output memory
//     budget, server.max_output_memory_mb). Live readers share the run's
//     events, encoded once when published (async.Stream), and take at most
//     sseBatchBytes of them at a time.
//   - A reader must keep up: a stored result within writeGrace plus its size
//     at minWriteRate (as an execute response), each write of an event
//     stream likewise; a reader that does not is cut off and lets go of
//     what it held. A live reader that is slow but reading skips what the
//     run's bounded backlog dropped (a `dropped` event says how many).
//   - Per tenant, at most server.tenant_max_result_readers requests read
//     stored results and server.tenant_max_live_readers follow unfinished
//     runs at once on this gateway; beyond them a reader is 429
//     QuotaExceeded, naming the key, before anything is read.
//
// So with R result readers and L live readers of a tenant at once, the
// gateway holds the results once (within the output budget when copied
// out of Redis) plus a constant per connection (its buffers and goroutine)
// and per live reader at most one batch of events the stream has since
// dropped.

// tenantSlots counts, per tenant, requests holding something capped per
// tenant (readers).
type tenantSlots struct {
	max  int
	key  string // the config key of max, for the refusal
	held *slots.Counter
}

func newTenantSlots(max int, key string) *tenantSlots {
	return &tenantSlots{max: max, key: key, held: slots.New(max, 0)}
}

// take holds a slot of tenant; the error (429 QuotaExceeded) means the
// tenant holds all of them. release gives the slot back (once).
func (t *tenantSlots) take(tenant, what string) (release func(), err error) {
	release, full := t.held.Take(tenant)
	if full != slots.None {
		return nil, &apiError{Status: http.StatusTooManyRequests, Type: TypeQuotaExceeded, RetryAfter: time.Second,
			Message: fmt.Sprintf("the tenant already has %d %s on this gateway (server.%s); retry when one finishes", t.max, what, t.key)}
	}
	return release, nil
}

// What the readers' refusals call them.
const (
	whatResultReaders = "requests reading stored results"
	whatLiveReaders   = "streams following unfinished executions"
)

// storedEnvelope reads the envelope of rec (done, not expired) for one
// reader: shared, its copy (if the store makes one) within the output
// budget. Without one it has answered the request (409 when the result
// was dropped meanwhile) and returns false; else release must be called
// once the envelope is written.
func (s *Server) storedEnvelope(c *gin.Context, rec async.Record) (env []byte, release func(), ok bool) {
	env, release, ok, err := s.runs.Store().Envelope(c.Request.Context(), rec.Key, s.flow.ReserveOutput)
	switch {
	case err != nil:
		s.fail(c, err)
		return nil, nil, false
	case !ok:
		s.fail(c, errResultExpired)
		return nil, nil, false
	}
	return env, release, true
}

// errResultExpired answers a read of a result that was dropped.
var errResultExpired = &apiError{Status: http.StatusConflict, Type: TypeResultExpired,
	Message: "the execution finished but its result was dropped (the tenant's server.async_tenant_result_bytes); it is not run again"}

// writeExecution writes st with env as its envelope (nil: none), without
// copying env: the body is st's JSON with `,"envelope":` env spliced in
// before its closing brace — the bytes encoding st with Envelope set would
// give, as Envelope is its last field and env is the compact JSON the
// flow encoded — within the slow-reader deadline of its size.
func writeExecution(c *gin.Context, st ExecutionStatus, env []byte) {
	st.Envelope = nil
	head, err := execution.EncodeJSON(st)
	if err != nil || len(env) == 0 {
		writeJSON(c, http.StatusOK, st)
		return
	}
	head = head[:len(head)-1] // the closing brace
	const field = `,"envelope":`
	writeBounded(c, http.StatusOK, len(head)+len(field)+len(env)+1, func(w io.Writer) error {
		for _, p := range [][]byte{head, []byte(field), env, []byte("}")} {
			if _, err := w.Write(p); err != nil {
				return err
			}
		}
		return nil
	})
}
