package execution

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/secrets"
	"github.com/execgate/execgate/telemetry"
	"github.com/execgate/execgate/tenancy"
	"github.com/execgate/execgate/toolbridge"
)

// The stages of Run before the answer, in order: decode, claim (the
// execution_id), decide, admit, run, observe and settle. execute in
// flow.go calls them; each records what the audit record will need in the
// request's state.

// decode reads and decodes the request, and takes the execution id it
// names.
func (f *Flow) decode(call Call, x *state) (*Request, error) {
	start := time.Now()
	body, err := call.Body()
	if err != nil {
		return nil, err
	}
	req, err := call.Decode(body)
	f.d.Metrics.Stage(telemetry.StageDecode, time.Since(start))
	if err != nil {
		return nil, err
	}
	x.req = req
	sum := sha256.Sum256([]byte(req.Source))
	x.srcSHA = hex.EncodeToString(sum[:])
	if req.ExecutionID != "" {
		x.id = req.ExecutionID
	}
	return req, nil
}

// claim takes the request's execution_id for this run, or returns the
// remembered answer of the run that already had it (a non-nil envelope).
// Without an execution_id there is nothing to claim.
func (f *Flow) claim(ctx context.Context, x *state, tenant tenancy.Tenant) (int, *Envelope, error) {
	req := x.req
	if req.ExecutionID == "" {
		return 0, nil, nil
	}
	key := IdempotencyKey{TenantID: tenant.ID, ExecutionID: req.ExecutionID}
	stored, ok, err := f.idem.Claim(ctx, key, Fingerprint(req))
	switch {
	case errors.Is(err, ErrIdempotencyConflict):
		return 0, nil, BadRequest("execution_id", "%q was already used for a different request within the idempotency window", req.ExecutionID)
	case err != nil:
		return 0, nil, err
	case ok:
		x.claimed = &key
		return 0, nil, nil
	}
	if x.releaseOutput, err = f.output.acquireReplay(ctx, len(stored.Body)); err != nil {
		return 0, nil, err
	}
	var env Envelope
	if err := json.Unmarshal(stored.Body, &env); err != nil {
		return 0, nil, fmt.Errorf("decoding remembered response: %w", err)
	}
	x.replayed = true
	if env.Decision != nil {
		x.decision = &policy.Decision{ID: env.Decision.ID, Allow: true, NetworkAccess: env.Decision.NetworkAccess,
			Limits: env.Decision.Limits, Egress: env.Decision.Egress, Isolation: env.Decision.Isolation, Runtime: env.Decision.Runtime,
			Secrets: env.Decision.Secrets}
		x.limits = env.Decision.Limits
	}
	return stored.Status, &env, nil
}

// decide asks the policy. Any error is a PolicyError; a deny carries the
// policy's reasons.
func (f *Flow) decide(ctx context.Context, x *state, tenant tenancy.Tenant) (policy.Decision, error) {
	req := x.req
	in := policyInput(x, tenant)
	pctx, span := f.tracer.Start(ctx, telemetry.StagePolicy)
	defer span.End()
	x.policySC = span.SpanContext()
	start := time.Now()
	dec, err := f.d.Policy.Decide(pctx, in)
	d := time.Since(start)
	f.d.Metrics.PolicyEval(d)
	f.d.Metrics.Stage(telemetry.StagePolicy, d)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "policy error")
		x.failedDecisionID = dec.ID
		return policy.Decision{}, fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	if dec.ID == "" {
		dec.ID = NewID()
	}
	x.decision = &dec
	x.limits = dec.Limits
	span.SetAttributes(
		attribute.String("execgate.decision_id", dec.ID),
		attribute.Bool("execgate.allow", dec.Allow),
		attribute.String("execgate.network_access", dec.NetworkAccess),
	)
	if !dec.Allow {
		return dec, Denied(dec.Reasons)
	}
	if want := policy.RuntimeFor(tenant, req.Language, req.Runtime); dec.Runtime != want {
		// The packages were resolved for the runtime asked for (or the
		// tenant's default); a policy deciding another could never run them.
		return dec, fmt.Errorf("%w: the policy decided runtime %q for a run asking for %q", ErrPolicy, dec.Runtime, want)
	}
	if x.env != nil && !dec.RequirementsAllowed {
		// The policy allowed the run but not its requirements: never install
		// what was not granted.
		return dec, Denied([]string{"requirements are not allowed for this tenant"})
	}
	if req.Mode == "test" {
		// Capability testing never reaches the network (DESIGN §12.6).
		x.decision.NetworkAccess = string(sandbox.NetworkNone)
		x.decision.Egress = policy.Egress{Allow: []string{}}
	}
	return *x.decision, nil
}

// policyInput is the policy's input for the request.
func policyInput(x *state, tenant tenancy.Tenant) policy.Input {
	preq := x.req.PolicyRequest()
	preq.Packages = PolicyPackages(x.env)
	return policy.BuildInput(tenant, x.principal, preq)
}

// Decide is the decision the flow would make for req as p of tenant, and
// the policy input it was made on, with nothing admitted or run (POST
// /v1/admin/policy/evaluate). A deny is a *PolicyDeniedError beside the
// decision; any other error a PolicyError.
func (f *Flow) Decide(ctx context.Context, p tenancy.Principal, tenant tenancy.Tenant, req *Request) (policy.Input, policy.Decision, error) {
	x := &state{principal: p, req: req}
	dec, err := f.decide(ctx, x, tenant)
	return policyInput(x, tenant), dec, err
}

// PolicyRequest is what the policy sees of req: its fields, and as tools
// the ones it narrows to plus, in test mode, the fixture tools it answers
// (policy.BuildInput hashes and measures the source and args; they never
// enter the input). The execute and dry-run paths and `execgate policy
// eval` all map a request through it.
func (req *Request) PolicyRequest() policy.Request {
	tools := append(make([]string, 0, len(req.Tools)), req.Tools...)
	if req.Fixtures != nil && req.Mode == "test" {
		for name := range req.Fixtures.Tools {
			tools = append(tools, name)
		}
		sort.Strings(tools)
	}
	preq := policy.Request{
		Language:      req.Language,
		Entrypoint:    req.Entrypoint,
		Source:        req.Source,
		Args:          req.Args,
		Requirements:  req.Requirements,
		NetworkAccess: req.NetworkAccess,
		Limits:        req.Limits,
		Mode:          req.Mode,
		Tools:         tools,
		Isolation:     req.Isolation,
		Runtime:       req.Runtime,
		Secrets:       req.Secrets,
	}
	if req.Egress != nil {
		preq.EgressAllow = req.Egress.Allow
	}
	return preq
}

// admit takes what a decided run holds while it runs, in this order: a
// place in the run queue (refused at once when full), the tenant's quota,
// memory for its output, and a fair run slot. On success the caller
// releases the ticket (slot and place) and ends the quota lease by
// settling it; on failure nothing is held.
func (f *Flow) admit(ctx context.Context, x *state, tenant tenancy.Tenant) (*ticket, *quota.Admission, error) {
	tk := f.queue.enter(tenant.ID)
	if tk == nil {
		return nil, nil, errOverloaded
	}
	adm, err := f.admitQuota(ctx, x, tenant)
	if err != nil {
		tk.release()
		return nil, nil, err
	}
	if x.releaseOutput, err = f.output.acquire(ctx, x.limits); err != nil {
		_ = adm.Release(context.WithoutCancel(ctx))
		tk.release()
		return nil, nil, err
	}
	if err := tk.acquire(ctx); err != nil {
		_ = adm.Release(context.WithoutCancel(ctx))
		tk.release()
		return nil, nil, err
	}
	return tk, adm, nil
}

// admitQuota asks the quota backend for this run.
func (f *Flow) admitQuota(ctx context.Context, x *state, tenant tenancy.Tenant) (*quota.Admission, error) {
	qctx, span := f.tracer.Start(ctx, telemetry.StageQuota)
	defer span.End()
	start := time.Now()
	adm, err := f.d.Quota.Admit(qctx, quota.AdmitRequest{
		TenantID:     tenant.ID,
		ExecutionID:  x.id,
		Limits:       tenant.Quota,
		CPUReserveMS: x.limits.CPUMS,
	})
	f.d.Metrics.Stage(telemetry.StageQuota, time.Since(start))
	if err == nil {
		x.quota = audit.Quota{Outcome: audit.QuotaAdmitted}
		// Less of the daily budget left than the decided cpu_ms: the run
		// gets what is left (the envelope's and the record's decided
		// limits show it, the jail enforces it).
		x.limits.CPUMS = adm.BudgetCPUMS(x.limits.CPUMS)
		return adm, nil
	}
	span.RecordError(err)
	x.quota = quotaRefusal(err)
	switch x.quota.Outcome {
	case audit.QuotaExceeded, audit.QuotaBudgetExhausted:
		f.d.Metrics.QuotaRefusal(tenant.ID, x.quota.Kind)
	case audit.QuotaUnavailable:
		if errors.Is(err, quota.ErrUnavailable) {
			f.d.Metrics.QuotaRefusal(tenant.ID, "unavailable")
		}
	}
	return nil, err
}

// quotaRefusal is how the audit record describes a refused admission.
func quotaRefusal(err error) audit.Quota {
	var ex *quota.ExceededError
	if errors.As(err, &ex) {
		q := audit.Quota{Outcome: audit.QuotaExceeded, Kind: string(ex.Kind), RetryAfterMS: ex.RetryAfter.Milliseconds()}
		if ex.Kind == quota.KindBudget {
			q.Outcome = audit.QuotaBudgetExhausted
		}
		return q
	}
	return audit.Quota{Outcome: audit.QuotaUnavailable}
}

// spec is the sandbox spec of the decided run.
func (f *Flow) spec(x *state, tenant tenancy.Tenant, dec policy.Decision) (sandbox.Spec, error) {
	req := x.req
	spec := sandbox.Spec{
		ExecutionID: x.id,
		TenantID:    tenant.ID,
		Language:    req.Language,
		Source:      req.Source,
		Entrypoint:  req.Entrypoint,
		Args:        req.Args,
		Mode:        req.Mode,
		Network:     sandbox.Network(dec.NetworkAccess),
		Limits:      x.limits,
		EgressAllow: dec.Egress.Allow,
		Isolation:   dec.Isolation,
		Runtime:     dec.Runtime,
		Output:      x.output,
		Files:       req.Files,
		Stdin:       req.Stdin,
	}
	if spec.Network == "" {
		spec.Network = sandbox.NetworkNone
	}
	if dec.RequirementsAllowed && x.env != nil {
		spec.Lock = x.env.Lock // installed by run (here, or by the executor that runs it)
	}
	if x.bridge = f.toolBridge(x, tenant, dec); x.bridge != nil {
		spec.Bridge = x.bridge
	}
	if req.Fixtures != nil {
		spec.Variables = req.Fixtures.Variables
		if len(req.Fixtures.Tools) > 0 {
			b, err := json.Marshal(req.Fixtures.Tools)
			if err != nil {
				return sandbox.Spec{}, fmt.Errorf("encoding tool fixtures: %w", err)
			}
			spec.ToolFixtures = b
		}
	}
	return spec, nil
}

// toolBridge returns the governed bridge of a run (nil without a hub, and in
// test mode, where the sandbox answers from the fixtures).
func (f *Flow) toolBridge(x *state, tenant tenancy.Tenant, dec policy.Decision) *toolbridge.Run {
	if f.d.Tools == nil || x.req.Mode == "test" {
		return nil
	}
	return f.d.Tools.NewRun(toolbridge.RunInfo{
		TenantID:   tenant.ID,
		Plan:       tenant.Plan,
		TenantData: tenant.Policy,
		Subject:    x.principal.Subject,
		Roles:      x.principal.Roles,
		DecisionID: dec.ID,
		Granted:    dec.Tools,
	})
}

// run installs the run's packages (once per environment) and runs the tool
// in the sandbox. A lost quota lease (the slot may be someone else's now)
// cancels the run. The error is the sandbox's: nothing was run, and the
// lease is released.
func (f *Flow) run(ctx context.Context, x *state, tenant tenancy.Tenant, dec policy.Decision, adm *quota.Admission) (sandbox.Result, error) {
	var deps string
	if dec.RequirementsAllowed && x.env != nil {
		// Installed here (once per environment; a hit when prepared), so
		// the runner only binds it. A dispatching gateway installs nothing
		// (dir ""): the executor installs the lock the run carries.
		envs, err := f.d.Environments.For(x.req.Language, dec.Runtime)
		if err != nil {
			return sandbox.Result{}, err
		}
		dir, _, failure, err := envs.Prepare(ctx, *x.env)
		if err != nil {
			return sandbox.Result{}, err
		}
		if failure != nil {
			return sandbox.Result{Status: sandbox.StatusError, Result: json.RawMessage("null"), Error: failure}, nil
		}
		deps = dir
	}
	spec, err := f.spec(x, tenant, dec)
	if err != nil {
		return sandbox.Result{}, err
	}
	spec.Deps = deps
	// The run's secrets are read now, at their use (a rotated file is
	// read anew), and masked out of everything it sends back: its live
	// output here, its result below (the runner masks both too; a
	// dispatched run's executor does before anything crosses Redis).
	if spec.Secrets, err = f.secretValues(ctx, x, tenant, dec); err != nil {
		if rerr := adm.Release(context.WithoutCancel(ctx)); rerr != nil {
			f.log.WarnContext(ctx, "quota release failed", telemetry.KeyExecutionID, x.id, "err", rerr)
		}
		return sandbox.Result{}, err
	}
	masker := secrets.NewMasker(spec.Secrets)
	if live := masker.Stream(spec.Output); live != nil {
		spec.Output = live.Write
		defer live.Flush() // before the run's answer is published
	}

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lost := make(chan struct{})
	go func() {
		select {
		case <-adm.Lost():
			close(lost)
			cancel()
		case <-rctx.Done():
		}
	}()

	runCtx, span := f.tracer.Start(quota.NewContext(rctx, adm), telemetry.StageRun)
	defer span.End()
	start := time.Now()
	res, err := f.d.Runner.Run(runCtx, spec)
	f.d.Metrics.Stage(telemetry.StageRun, time.Since(start))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "sandbox unavailable")
		if errors.Is(err, quota.ErrExceeded) { // a dispatcher's max_queued: nothing was queued
			x.quota = quotaRefusal(err)
			f.d.Metrics.QuotaRefusal(tenant.ID, x.quota.Kind)
		}
		var unknown *sandbox.OutcomeUnknownError
		if errors.As(err, &unknown) {
			// It may have run: charged the whole reservation, as a lost
			// executor's run is.
			f.settleRun(ctx, adm, sandbox.Result{Usage: sandbox.Usage{CPUMS: spec.Limits.CPUMS}})
			return sandbox.Result{}, err
		}
		if rerr := adm.Release(context.WithoutCancel(ctx)); rerr != nil {
			f.log.WarnContext(ctx, "quota release failed", telemetry.KeyExecutionID, x.id, "err", rerr)
		}
		return sandbox.Result{}, err
	}
	select {
	case <-lost:
		f.log.ErrorContext(ctx, "quota lease lost during the run; the run was cancelled", telemetry.KeyExecutionID, x.id, telemetry.KeyTenantID, tenant.ID)
	default:
	}
	sandbox.MaskResult(&res, masker)
	if x.bridge != nil { // the bridge is the gateway's, in split mode too
		res.Usage.BridgeCPUMS = x.bridge.ChargedCPUMS()
	}
	span.SetAttributes(attribute.String("execgate.status", string(res.Status)), attribute.String("execgate.error_type", res.ErrorType()))
	if res.Status != sandbox.StatusOK {
		span.SetStatus(codes.Error, res.ErrorType())
	}
	return res, nil
}

// secretValues are the brokered secrets of the decided run: the ones
// policy granted (dec.Secrets) read from the tenant's config, or in test
// mode the request's stand-ins (fixtures.secrets) for the names it asked
// for. A secret that cannot be read refuses the run (SecretUnavailable,
// naming it); nothing of a value is ever logged.
func (f *Flow) secretValues(ctx context.Context, x *state, tenant tenancy.Tenant, dec policy.Decision) ([]secrets.Value, error) {
	var vals []secrets.Value
	if x.req.Mode == "test" {
		for _, name := range x.req.Secrets {
			vals = append(vals, secrets.NewValue(name, x.req.Fixtures.Secrets[name])) // the decoder checked each is there
		}
	} else if len(dec.Secrets) > 0 {
		var err error
		if vals, err = secrets.Resolve(tenant.Secrets, dec.Secrets, f.d.Getenv); err != nil {
			return nil, err
		}
	}
	for _, v := range vals {
		if len(v.Reveal()) < secrets.MinMaskBytes {
			f.log.WarnContext(ctx, "a brokered secret shorter than the masking minimum is delivered but not masked",
				telemetry.KeyExecutionID, x.id, telemetry.KeyTenantID, tenant.ID, "secret", v.Name(), "min_bytes", secrets.MinMaskBytes)
		}
	}
	x.secrets = secrets.Names(vals)
	return vals, nil
}

// observe takes note of what a run showed about the host and the tenant:
// a good jailed run (readiness), denied egress and syscalls (metrics).
func (f *Flow) observe(x *state, tenant tenancy.Tenant, res sandbox.Result) {
	x.result = &res
	if res.Status == sandbox.StatusOK {
		f.d.Succeeded(f.now())
	}
	for _, a := range res.Egress {
		if !a.Allowed {
			f.d.Metrics.EgressDenied(tenant.ID)
		}
	}
	if res.ErrorType() == sandbox.ErrSyscallDenied {
		f.d.Metrics.SyscallDenied(res.DeniedSyscall)
	}
}

// settleRun charges the run's CPU (the jail's and the gateway's for its
// tool bridge requests) and ends its lease. The run happened and its answer
// stands; if the backend is down the charge is retried in the background
// (settle.go).
func (f *Flow) settleRun(ctx context.Context, adm *quota.Admission, res sandbox.Result) {
	sctx, span := f.tracer.Start(ctx, telemetry.StageSettle)
	defer span.End()
	start := time.Now()
	if err := f.settle.settle(sctx, adm, res.Usage.CPUMS+res.Usage.BridgeCPUMS); err != nil {
		span.RecordError(err)
	}
	f.d.Metrics.Stage(telemetry.StageSettle, time.Since(start))
}
