package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/decode"
	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/execution/async"
	"github.com/execgate/execgate/tenancy"
)

// The async API (issue #15): POST /v1/executions submits an execute
// request and answers 202 at once; the run goes through the same flow as
// POST /v1/execute (decide, admit, run, settle, record) in the background;
// GET /v1/executions/{id} reads its state and, when done, its envelope;
// DELETE cancels it. Executions are scoped to their tenant: another
// tenant's id is 404, whether it exists or not.

// ExecutionStatus is the body of GET /v1/executions/{id} (and of the 202
// of POST, without the times).
type ExecutionStatus struct {
	ExecutionID     string     `json:"execution_id"`
	TenantID        string     `json:"tenant_id"`
	Status          string     `json:"status"` // queued | running | done
	CancelRequested bool       `json:"cancel_requested,omitempty"`
	SubmittedAt     *time.Time `json:"submitted_at,omitempty"`
	StartedAt       *time.Time `json:"started_at,omitempty"`
	FinishedAt      *time.Time `json:"finished_at,omitempty"`
	// HTTPStatus is what POST /v1/execute would have answered; with
	// Envelope, once done.
	HTTPStatus int             `json:"http_status,omitempty"`
	Envelope   json.RawMessage `json:"envelope,omitempty"`
}

// asyncStore is where s keeps async results and every run's artifacts:
// Deps.Async, else one in this process.
func (s *Server) asyncStore() async.Store {
	if s.d.Async != nil {
		return s.d.Async
	}
	return async.NewMemoryStore(s.cfg.AsyncLimits(), s.now)
}

// newRuns builds the async runs of s on its flow, recording in store.
func (s *Server) newRuns(store async.Store) {
	poll := time.Duration(0)
	if s.d.Async != nil {
		poll = asyncCancelPoll // a shared store: a cancel may come through another replica
	}
	s.runs = async.NewRuns(s.flow, store, async.Config{CancelPoll: poll}, s.log)
}

// asyncCancelPoll is how often a replica looks for cancels of its runs
// requested through another replica.
const asyncCancelPoll = 250 * time.Millisecond

// handleSubmitExecution is POST /v1/executions.
func (s *Server) handleSubmitExecution(c *gin.Context) {
	ctx := c.Request.Context()
	p, _ := tenancy.PrincipalFrom(ctx)
	a, _ := c.Value(keyAccess).(Access)
	id := c.GetString(keyExecutionID)
	body, err := readBody(c.Request, c.Writer, s.caps.Body)
	var (
		req      *ExecuteRequest
		tenant   tenancy.Tenant
		callback string
		done     func(context.Context, async.Record)
	)
	if err == nil {
		body, callback, err = decode.SplitCallback(body, s.caps)
	}
	if err == nil {
		req, err = s.decodeExecute(body)
	}
	if err == nil {
		tenant, err = s.d.Tenants.Authorize(p, req.TenantID, a.Grants)
	}
	if err == nil && req.ExecutionID != "" {
		id = req.ExecutionID
	}
	if err == nil && callback != "" {
		done, err = s.callback(ctx, p, tenant, callback)
	}
	if err == nil {
		err = s.runs.Submit(ctx, async.Key{TenantID: tenant.ID, ExecutionID: id}, execution.Call{
			Principal: p, Grants: a.Grants, ID: id,
			Body: func() ([]byte, error) { return body, nil }, Decode: s.decodeExecute,
		}, done)
	}
	if err != nil {
		s.refuseSubmission(c, p, a, id, err)
		return
	}
	c.Set(keyExecutionID, id)
	c.Header("Location", "/v1/executions/"+id)
	c.Header("X-Execution-Id", id)
	writeJSON(c, http.StatusAccepted, ExecutionStatus{ExecutionID: id, TenantID: tenant.ID, Status: string(async.StateQueued)})
}

// refuseSubmission answers a submission that was not accepted. The
// refusal goes through the flow like a refused POST /v1/execute, so it
// leaves its audit record and answers with an envelope.
func (s *Server) refuseSubmission(c *gin.Context, p tenancy.Principal, a Access, id string, err error) {
	var many *async.TooManyError
	switch {
	case errors.As(err, &many):
		err = &apiError{Status: http.StatusTooManyRequests, Type: TypeQuotaExceeded, RetryAfter: time.Second,
			Message: "the tenant already has its maximum of queued or running async executions (server.async_max_active); retry when one finishes", Err: err}
	case errors.Is(err, async.ErrExists):
		err = badRequest("execution_id", "%q already names an async execution of this tenant (kept for server.async_result_ttl_seconds)", id)
	}
	out := s.flow.Run(c.Request.Context(), execution.Call{
		Principal: p, Grants: a.Grants, ID: id,
		Body:   func() ([]byte, error) { return nil, nil },
		Decode: func([]byte) (*ExecuteRequest, error) { return nil, err },
	})
	defer out.Release()
	if out.RetryAfter > 0 {
		c.Header("Retry-After", execution.RetryAfterSeconds(out.RetryAfter))
	}
	c.Header("X-Execution-Id", out.Envelope.ExecutionID)
	c.Header("X-Execution-Status", out.Envelope.ExecutionStatus())
	writeEnvelope(c, out.Status, out.Body)
}

// executionKey is the execution the request names, for the caller's tenant
// or (a platform admin) the tenant query parameter. A tenant the caller
// may not reach is refused (403) before any lookup.
func (s *Server) executionKey(c *gin.Context) (async.Key, error) {
	p, _ := tenancy.PrincipalFrom(c.Request.Context())
	target := c.Query("tenant")
	if _, err := s.authorizeTenant(c, p, target); err != nil {
		return async.Key{}, err
	}
	if target == "" {
		target = p.TenantID
	}
	id := c.Param("id")
	if !decode.ValidExecutionID(id) || len(target) > decode.MaxIDLen {
		return async.Key{}, errNoExecution
	}
	return async.Key{TenantID: target, ExecutionID: id}, nil
}

// errNoExecution is every lookup that finds nothing the caller may see.
var errNoExecution = &apiError{Status: http.StatusNotFound, Type: TypeNotFound, Message: "no such execution"}

// execution finds, through find (the store's Head, or the runs' Cancel),
// the execution the route names for the caller. Without one it has
// answered the request (a refused key, a store error, or 404 for what the
// caller may not see) and returns false.
func (s *Server) execution(c *gin.Context, find func(context.Context, async.Key) (async.Record, bool, error)) (async.Key, async.Record, bool) {
	k, err := s.executionKey(c)
	if err != nil {
		s.fail(c, err)
		return k, async.Record{}, false
	}
	rec, ok := s.lookup(c, k, find)
	return k, rec, ok
}

// lookup is execution for a key already checked.
func (s *Server) lookup(c *gin.Context, k async.Key, find func(context.Context, async.Key) (async.Record, bool, error)) (async.Record, bool) {
	rec, ok, err := find(c.Request.Context(), k)
	switch {
	case err != nil:
		s.fail(c, err)
		return rec, false
	case !ok:
		s.fail(c, errNoExecution)
		return rec, false
	}
	return rec, true
}

// handleGetExecution is GET /v1/executions/{id}: one of the tenant's
// server.tenant_max_result_readers, the envelope written from the store's
// shared bytes (readers.go).
func (s *Server) handleGetExecution(c *gin.Context) {
	k, done, ok := s.resultReader(c)
	if !ok {
		return
	}
	defer done()
	rec, ok := s.lookup(c, k, s.runs.Store().Head)
	switch {
	case !ok:
		return
	case rec.State != async.StateDone:
		writeJSON(c, http.StatusOK, executionStatus(rec))
		return
	case rec.Expired:
		s.fail(c, errResultExpired)
		return
	}
	env, release, ok := s.storedEnvelope(c, rec)
	if !ok {
		return
	}
	defer release()
	writeExecution(c, executionStatus(rec), env)
}

// resultReader is the execution the route names for one of the tenant's
// readers of stored results (server.tenant_max_result_readers), the
// reader's place held until done is called. Without one it has answered
// the request and returns false.
func (s *Server) resultReader(c *gin.Context) (k async.Key, done func(), ok bool) {
	k, err := s.executionKey(c)
	if err == nil {
		done, err = s.resultReaders.take(k.TenantID, whatResultReaders)
	}
	if err != nil {
		s.fail(c, err)
		return k, nil, false
	}
	return k, done, true
}

// handleCancelExecution is DELETE /v1/executions/{id}: 202 when a queued
// or running execution is asked to stop, 200 with its state when it was
// already done.
func (s *Server) handleCancelExecution(c *gin.Context) {
	_, rec, ok := s.execution(c, s.runs.Cancel)
	if !ok {
		return
	}
	st := executionStatus(rec)
	st.HTTPStatus, st.Envelope = 0, nil
	if rec.State == async.StateDone {
		writeJSON(c, http.StatusOK, st)
		return
	}
	st.CancelRequested = true
	writeJSON(c, http.StatusAccepted, st)
}

// executionStatus is what the API shows of rec.
func executionStatus(rec async.Record) ExecutionStatus {
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &t
	}
	st := ExecutionStatus{ExecutionID: rec.ExecutionID, TenantID: rec.TenantID, Status: string(rec.State),
		CancelRequested: rec.CancelRequested, SubmittedAt: at(rec.SubmittedAt), StartedAt: at(rec.StartedAt), FinishedAt: at(rec.FinishedAt)}
	if rec.State == async.StateDone {
		st.HTTPStatus, st.Envelope = rec.HTTPStatus, rec.Envelope
	}
	return st
}
