package execution

import (
	"context"
	"time"

	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/telemetry"
	"github.com/execgate/execgate/tenancy"
)

// runSpec runs spec, which the flow made itself rather than a policy
// decided (Validate's checker), for tenant: it takes a place in
// the run queue, the tenant's quota (reserving reserveCPUMS of its daily
// budget, or what is left of it, which then caps the spec's cpu_ms) and a
// run slot like any run, and settles the CPU it used. It leaves no audit record;
// the error is a refusal or the sandbox's (nothing was run).
func (f *Flow) runSpec(ctx context.Context, tenant tenancy.Tenant, spec sandbox.Spec, reserveCPUMS int64) (sandbox.Result, error) {
	tk := f.queue.enter(tenant.ID)
	if tk == nil {
		return sandbox.Result{}, errOverloaded
	}
	defer tk.release()
	qctx, span := f.tracer.Start(ctx, telemetry.StageQuota)
	adm, err := f.d.Quota.Admit(qctx, quota.AdmitRequest{TenantID: tenant.ID, ExecutionID: spec.ExecutionID, Limits: tenant.Quota, CPUReserveMS: reserveCPUMS})
	span.End()
	if err != nil {
		return sandbox.Result{}, err
	}
	spec.Limits.CPUMS = adm.BudgetCPUMS(spec.Limits.CPUMS) // what is left of the daily budget, if less
	if err := tk.acquire(ctx); err != nil {
		_ = adm.Release(context.WithoutCancel(ctx))
		return sandbox.Result{}, err
	}
	rctx, span := f.tracer.Start(ctx, telemetry.StageRun)
	start := time.Now()
	res, err := f.d.Runner.Run(rctx, spec)
	f.d.Metrics.Stage(telemetry.StageRun, time.Since(start))
	span.End()
	tk.release()
	if err != nil {
		_ = adm.Release(context.WithoutCancel(ctx))
		return sandbox.Result{}, err
	}
	_ = f.settle.settle(ctx, adm, res.Usage.CPUMS) // logged and retried
	return res, nil
}
