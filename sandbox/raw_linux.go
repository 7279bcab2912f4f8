package sandbox

import (
	"github.com/execgate/execgate/jaillayout"
)

// RawCommand returns nsjail's argv and the harness request that run spec's
// jail by hand: the runner's own rendered profile config, placed directly
// under the runner's parent cgroup. It is the jail the runner starts minus the
// runner (no per-run cgroup or uid, capture, deadline or classification), so
// benchmarks can compare the runner with raw nsjail on the very same jail.
// Start it with the request on stdin and fds 3 and 4 open (e.g. /dev/null).
func (r *Runner) RawCommand(spec Spec) (argv []string, request []byte, err error) {
	spec, p, err := normalize(spec)
	if err != nil {
		return nil, nil, err
	}
	cfgPath, err := r.profileFile(p, false)
	if err != nil {
		return nil, nil, err
	}
	if request, err = encodeRequest(spec, 0); err != nil {
		return nil, nil, err
	}
	// Raw nsjail runs as root with the tool mapped to host uid jaillayout.ToolUID
	// (outside sandbox.uid_range): a benchmark's jail, not a tenant's.
	argv = []string{r.nsjail, "--config", cfgPath}
	argv = append(argv, idMapArgs(jaillayout.ToolUID)...)
	argv = append(argv, r.cg.ParentNsjailArgs()...)
	return argv, request, nil
}
