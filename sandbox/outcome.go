package sandbox

// OutcomeUnknownError means a runner cannot know whether the run ran, or
// how it ended: a dispatched run (server.role gateway) whose dispatch Redis
// lost the state that would tell (a restart without persistence, a crash, a
// failover to a lagging replica) after an executor may have started it.
// The run may have run, tool calls included, so it is never run again: the
// flow keeps its execution_id claimed, charges the whole cpu_ms
// reservation and answers 502 OutcomeUnknown. A runner returns it only
// when it cannot prove that nothing ran (an UnavailableError says that).
type OutcomeUnknownError struct {
	Reason   string // one line: why the outcome is unknown
	Executor string // the executor that was confirmed to start it ("" none)
	Err      error  // underlying error, if any (for the log)
}

func (e *OutcomeUnknownError) Error() string {
	msg := "outcome unknown: " + e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *OutcomeUnknownError) Unwrap() error { return e.Err }
