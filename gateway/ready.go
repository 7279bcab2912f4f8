package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// The readiness probe's own tool: a real jailed execution, not a syntax
// check (DESIGN §12.1).
const probeSource = "def run(args, context):\n    return {\"ok\": True}\n"

var probeLimits = sandbox.Limits{TimeoutMS: 5000, CPUMS: 5000, MemoryMB: 128, Pids: 8, OutputBytes: 4096, TmpMB: 4}.Or(limits.Default)

// probeTimeout bounds one probe run (a cold jail is well under a second).
const probeTimeout = 15 * time.Second

// failureRetry is how long a failed probe is cached, so a readiness storm
// does not start a jail per request while the sandbox is broken.
const failureRetry = time.Second

// readiness caches the sandbox check: a success (the probe's, or any real
// run that ended ok) counts for ttl.
type readiness struct {
	s   *Server
	ttl time.Duration

	probeMu sync.Mutex // serialises probe runs

	mu      sync.Mutex // guards the fields below
	okAt    time.Time  // last successful jailed run
	failAt  time.Time  // last failed probe
	failErr error
}

func newReadiness(s *Server, ttl time.Duration) *readiness {
	return &readiness{s: s, ttl: ttl}
}

// succeeded records a real jailed run that ended ok.
func (r *readiness) succeeded(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if at.After(r.okAt) {
		r.okAt = at
	}
}

// sandbox reports whether a jailed run succeeded within ttl, probing when
// none did. age is how old the answer is.
func (r *readiness) sandbox(ctx context.Context) (age time.Duration, err error) {
	now := r.s.now()
	r.mu.Lock()
	if !r.okAt.IsZero() && now.Sub(r.okAt) < r.ttl {
		defer r.mu.Unlock()
		return now.Sub(r.okAt), nil
	}
	if r.failErr != nil && now.Sub(r.failAt) < failureRetry {
		defer r.mu.Unlock()
		return now.Sub(r.failAt), r.failErr
	}
	r.mu.Unlock()

	r.probeMu.Lock()
	defer r.probeMu.Unlock()
	// Another caller may have probed while we waited.
	r.mu.Lock()
	now = r.s.now()
	if !r.okAt.IsZero() && now.Sub(r.okAt) < r.ttl {
		defer r.mu.Unlock()
		return now.Sub(r.okAt), nil
	}
	r.mu.Unlock()

	err = r.probe(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failAt, r.failErr = r.s.now(), err
		return 0, err
	}
	r.okAt, r.failErr = r.s.now(), nil
	return 0, nil
}

func (r *readiness) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
	defer cancel()
	res, err := r.s.d.Runner.Run(ctx, sandbox.Spec{
		ExecutionID: "readyz-" + execution.NewID(),
		TenantID:    "execgate-readyz",
		Language:    "python",
		Source:      probeSource,
		Entrypoint:  "run",
		Args:        []byte("{}"),
		Mode:        "run",
		Network:     sandbox.NetworkNone,
		Limits:      probeLimits,
	})
	if err != nil {
		return err
	}
	if res.Status != sandbox.StatusOK {
		return fmt.Errorf("probe run ended %s: %s: %s", res.Status, res.ErrorType(), errMessage(res.Error))
	}
	if !bytes.Equal(bytes.Join(bytes.Fields(res.Result), nil), []byte(`{"ok":true}`)) {
		return fmt.Errorf("probe run returned %s, want {\"ok\": true}", res.Result)
	}
	return nil
}

func errMessage(e *sandbox.ErrorInfo) string {
	if e == nil {
		return ""
	}
	return e.Message
}

// checkTimeout bounds each non-sandbox readiness check.
const checkTimeout = 3 * time.Second

// handleReadyz is GET /readyz: 200 only when every check that is not
// optional passes; the body lists each.
func (s *Server) handleReadyz(c *gin.Context) {
	ctx := c.Request.Context()
	resp := ReadyResponse{Ready: true}
	age, err := s.ready.sandbox(ctx)
	resp.Checks = append(resp.Checks, checkResult("sandbox", age, err))
	for _, chk := range s.d.Ready {
		cctx, cancel := context.WithTimeout(ctx, checkTimeout)
		var detail string
		var err error
		if chk.Info != nil {
			detail, err = chk.Info(cctx)
		} else {
			err = chk.Run(cctx)
		}
		cancel()
		r := checkResult(chk.Name, 0, err)
		r.Detail = detail
		r.Optional = chk.Optional
		resp.Checks = append(resp.Checks, r)
	}
	status := http.StatusOK
	for _, r := range resp.Checks {
		if !r.OK && !r.Optional {
			resp.Ready = false
			status = http.StatusServiceUnavailable
		}
	}
	writeJSON(c, status, resp)
}

func checkResult(name string, age time.Duration, err error) CheckResult {
	r := CheckResult{Name: name, OK: err == nil, AgeMS: age.Milliseconds()}
	if err != nil {
		r.Error = err.Error()
		var ue *sandbox.UnavailableError
		if errors.As(err, &ue) && ue.Hint != "" {
			r.Error += " (hint: " + ue.Hint + ")"
		}
	}
	return r
}
