package dispatch

import "strconv"

// keys names the dispatch keys under one prefix (the layout is in doc.go).
type keys struct{ p string }

func newKeys(prefix string) keys { return keys{p: prefix + ":dispatch:"} }

const group = "executors"

// runsFor is the stream of the runs of one target: a Python runtime's
// name, or "deno" for JavaScript and TypeScript (target).
func (k keys) runsFor(target string) string { return k.p + "runs:" + target }
func (k keys) refused() string              { return k.p + "refused" }
func (k keys) executors() string            { return k.p + "executors" }
func (k keys) executor(id string) string    { return k.p + "executor:" + id }
func (k keys) run(runID string) string      { return k.p + "{" + runID + "}:" }
func (k keys) started(runID string) string {
	return k.run(runID) + "started"
}
func (k keys) reply(runID string) string { return k.run(runID) + "reply" }

// env is a prepared environment's lock (envs.go).
func (k keys) env(id string) string { return k.p + "env:" + id }

// queued is a tenant's runs dispatched and not yet started (max_queued).
func (k keys) queued(tenant string) string { return k.p + "{t:" + tenant + "}:queued" }
func (k keys) cancel(runID string) string  { return k.run(runID) + "cancel" }
func (k keys) bridge(runID string) string  { return k.run(runID) + "bridge" }
func (k keys) output(runID string) string  { return k.run(runID) + "output" }

// start is the run's start requests (executor → gateway), confirm:E the
// gateway's answer to executor E, running the confirmed executor's lease
// on the run (renewed every beat while it runs).
func (k keys) start(runID string) string { return k.run(runID) + "start" }
func (k keys) confirm(runID, executor string) string {
	return k.run(runID) + "confirm:" + executor
}
func (k keys) running(runID string) string { return k.run(runID) + "running" }
func (k keys) bridgeAnswer(runID string, n uint64) string {
	return k.run(runID) + "bridge:" + strconv.FormatUint(n, 10)
}

// Markers a gateway leaves in {R}:started so no executor ever runs the job.
const (
	startedExpired   = "gateway:expired"   // no executor started it in time
	startedAbandoned = "gateway:abandoned" // the caller went away first
)

// maxRefusedLength bounds the refused stream.
const maxRefusedLength = 1000
