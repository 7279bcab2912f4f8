package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/execgate/execgate/sandbox/internal/unavailable"
)

// ProbeHost detects the cgroups a runner would use for mode and parent
// (the rules of New) and proves the parent cgroup usable by creating and
// removing a probe cgroup below it; on v2 the probe must have the memory
// and pids controllers (delegated to the parent). It enables nothing: a
// parent Setup would still set up can fail here. A failure is an
// *UnavailableError whose Reason and Hint say what to do.
func ProbeHost(mode, parent string) (Probe, error) {
	return probeCgroups(mode, FSRoot, parent, isFS)
}

func probeCgroups(mode, root, parent string, isFS func(string, int64) bool) (Probe, error) {
	cg, err := detectCgroupsWith(mode, root, parent, isFS)
	if err != nil {
		return Probe{}, err
	}
	p := Probe{Version: cg.version, Root: cg.root, Parents: cg.ParentDirs()}
	if cg.version == 2 {
		return cg.probeV2(p)
	}
	if cg.acct == acctUnified {
		p.Parents = p.Parents[:len(v1Controllers)] // the hybrid mount is optional
	}
	probe := fmt.Sprintf("diagnose-%d", os.Getpid())
	for _, dir := range p.Parents {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return p, &unavailable.Error{Reason: fmt.Sprintf("v1: creating the parent cgroup %s", dir), Hint: Hint, Err: err}
		}
		pd := filepath.Join(dir, probe)
		if err := os.Mkdir(pd, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return p, &unavailable.Error{Reason: fmt.Sprintf("v1: creating a cgroup below %s", dir), Hint: Hint, Err: err}
		}
		os.Remove(pd)
	}
	p.Detail = fmt.Sprintf("v1 (memory, pids, cpu) under %s/{memory,pids,cpu}/%s", cg.root, cg.parent)
	if cg.v2root != "" {
		p.Detail += "; v2 at " + cg.v2root + " lacks the memory controller"
	}
	return p, nil
}

// probeV2 says what Setup would do on cgroup v2 (v2Plan) without changing
// the host, and when the parent exists with its controllers already,
// proves it takes a child cgroup.
func (c *Manager) probeV2(p Probe) (Probe, error) {
	plan, err := c.v2Plan()
	if err != nil {
		return p, err
	}
	parent := p.Parents[0]
	if plan.remount == "" && len(plan.enable) == 0 && plan.create == "" {
		pd := filepath.Join(parent, fmt.Sprintf("diagnose-%d", os.Getpid()))
		if err := os.Mkdir(pd, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return p, &unavailable.Error{Reason: "v2: creating a cgroup below " + parent, Hint: v2Hint, Err: err}
		}
		ok := hasControllers(pd, "memory", "pids")
		os.Remove(pd)
		if !ok {
			return p, &unavailable.Error{Reason: "v2: a cgroup below " + parent + " lacks the memory or pids controller", Hint: v2Hint}
		}
	}
	p.Detail = fmt.Sprintf("v2 at %s; runs below %s (%s); %s", c.mount, parent, c.baseWhy, plan)
	return p, nil
}
