package sandbox

import "time"

// SettleWarmJail starts a warm jail of the probe's profile on r and times
// its Settle (at most max, never stopped early); it reports how long Settle
// took, the jail's CPU use when it returned and 100 ms later. The jail is
// discarded.
func SettleWarmJail(r *Runner, max time.Duration) (took, cpu, later time.Duration, err error) {
	_, prof, err := normalize(probeSpec())
	if err != nil {
		return 0, 0, 0, err
	}
	w, err := r.startWarm(prof)
	if err != nil {
		return 0, 0, 0, err
	}
	defer w.Discard()
	t0 := time.Now()
	w.Settle(max, func() bool { return false })
	took = time.Since(t0)
	cpu, _ = w.j.cg.CPUUsage()
	time.Sleep(100 * time.Millisecond)
	later, _ = w.j.cg.CPUUsage()
	return took, cpu, later, nil
}
