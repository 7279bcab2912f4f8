package sandbox

import (
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox/seccomp"
)

// Hooks for the external tests (package sandbox_test), which cannot be
// internal because they use internal/testenv, which imports sandbox.

// SetSeccompPolicy replaces r's Kafel policy (to provoke a compile failure).
func SetSeccompPolicy(r *Runner, policy string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seccompPolicy = policy
	r.profiles = map[string]string{}
}

// SeccompPolicy is the shipped policy text.
func SeccompPolicy() string { return seccomp.Policy() }

// CgroupDirs lists the run-parent directories of r (one per hierarchy,
// the CPU accounting one included).
func CgroupDirs(r *Runner) []string { return r.cg.ParentDirs() }

// WarmIdle is the number of idle warm jails.
func WarmIdle(r *Runner) int { return r.pool.IdleCount() }

// WarmHits is the number of runs served by a warm jail.
func WarmHits(r *Runner) int64 { return r.pool.Hits() }

// probeSpec is the probe tool's run at the default limits.
func probeSpec() Spec {
	return Spec{Source: "async def run(args, context):\n    return {\"ok\": True}\n", Limits: limits.Default}
}

// ProbeRequest is the harness request of the probe tool.
func ProbeRequest() []byte {
	spec, _, _ := normalize(probeSpec())
	req, _ := encodeRequest(spec, 0)
	return req
}

// NsjailPath is the nsjail binary r uses.
func NsjailPath(r *Runner) string { return r.nsjail }

// CgroupParentName is r's parent cgroup, relative to each hierarchy.
func CgroupParentName(r *Runner) string { return r.cg.Parent() }

// WarmProfiles counts the warm pool's profiles per tenant that registered
// them ("" for the one warmed at start-up).
func WarmProfiles(r *Runner) map[string]int { return r.pool.ProfilesOf() }

// WarmIdleOf is the number of idle warm jails for spec's profile.
func WarmIdleOf(r *Runner, spec Spec) int {
	_, p, _ := normalize(spec)
	return r.pool.IdleOf(p)
}

// WarmIdleOfEnv is the number of idle warm jails for spec's profile with
// the package environment envID.
func WarmIdleOfEnv(r *Runner, spec Spec, envID string) int {
	_, p, _ := normalize(spec)
	p.Deps = envID
	return r.pool.IdleOf(p)
}

// WarmEnvironmentsOf lists the environment profiles registered to tenant.
func WarmEnvironmentsOf(r *Runner, tenant string) []string { return r.pool.EnvsOf(tenant) }
