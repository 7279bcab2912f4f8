// Package dispatch carries decided runs from gateways to a fleet of
// executors over Redis Streams (issue #15), so the gateway (auth, policy,
// quota, audit, tool credentials) needs no privileges and the executor
// (nsjail) holds no tenant secrets.
//
// A gateway's Dispatcher is the flow's Runner: it signs the decided run (a
// Job: the sandbox spec without its tool bridge, a fresh run id, an expiry)
// with HMAC-SHA256 under the spec key, XADDs it to the run stream and waits
// for the reply on the run's own list. An Executor reads the stream with a
// consumer group, verifies the signature, the wire version and the
// expiry, marks the run started with SET NX, acknowledges and deletes the
// entry, asks the gateway to confirm the start (the one place where "at
// most once" is decided: the gateway confirms one executor per run, in its
// own memory), runs it in its sandbox and pushes the signed result. Tool
// calls of a run travel back to the gateway that owns it on the run's
// bridge list (bridge.go), live output on its output list (output.go);
// both, and the start and its confirmation, are signed frames of the run
// (frames.go).
//
// Key layout (P is dispatch.key_prefix; {R} a run id, in braces so one
// run's keys share a cluster slot):
//
//	P:dispatch:runs                stream of jobs, group "executors", MAXLEN ~ max_stream_length
//	P:dispatch:refused             stream of refused entries (why, by whom), MAXLEN ~ 1000
//	P:dispatch:executors           zset: executor id → heartbeat expiry (unix ms)
//	P:dispatch:executor:ID         string: the executor's Announcement (JSON), PX 3 beats
//	P:dispatch:{R}:started         string: who started the run (an executor id, or
//	                               "gateway:expired" / "gateway:abandoned": never run), SET NX
//	P:dispatch:{R}:reply           list: the signed Reply, one element, with a TTL
//	P:dispatch:{R}:cancel          string: the gateway gave up on the run; its executor
//	                               kills it (looked at once a beat)
//	P:dispatch:{R}:start           list: start requests (executor → gateway), signed
//	P:dispatch:{R}:confirm:E       list: the gateway's signed yes or no to executor E
//	P:dispatch:{R}:running         string: the confirmed executor's lease on the run,
//	                               PX 3 beats, renewed every beat, deleted with the reply
//	P:dispatch:{R}:bridge          list: the run's tool requests (executor → gateway), signed
//	P:dispatch:{R}:bridge:N        list: the answer to request N (gateway → executor), signed
//	P:dispatch:{R}:output          list: the run's live output chunks (executor → gateway), signed
//	P:dispatch:env:ID              string: the lock of environment ID, prepared or run
//	                               through a gateway (envs.go), 7 days from last use
//	P:dispatch:{t:T}:queued        zset: tenant T's runs dispatched and not yet started,
//	                               run id → its place's expiry (Redis TIME + queue
//	                               timeout, unix ms); written only for
//	                               tenants with a max_queued (enqueue.lua); the
//	                               executor removes a run when it takes it, the gateway
//	                               when it expires or abandons it
//
// At most once: an entry is run only by the executor whose SET NX on
// {R}:started succeeds and whose start request (a signed frame on
// {R}:start) the run's gateway then confirms. The gateway confirms the
// first executor that asks and tells any other no; it keeps which in
// memory, so a run is never started twice, nor unknown to its gateway,
// even when Redis loses data (a restart without persistence, a failover to
// a lagging replica): SET NX markers lost that way can let a second
// executor read the entry, but not run it. An executor with no answer
// within 10 s (or 3 beats, if longer) does not run the run and replies so.
// Entries read but not started (the executor died in between) are claimed
// by another executor with XAUTOCLAIM after 3 beats.
//
// What the gateway answers: "nothing was run" (503) only when it never
// confirmed a start — no start is confirmed by a gateway that stopped
// waiting, whatever Redis holds — or when the executor it confirmed says
// so in a signed reply. A confirmed run is leased by its executor
// ({R}:running, renewed every beat); the lease missing for 3 beats in a
// row ends the wait: with the executor's heartbeat expired too, the run is
// ExecutorLost; with the executor alive (it finished, and Redis lost its
// reply) the outcome is unknown, *sandbox.OutcomeUnknownError (502
// OutcomeUnknown). Either is never run again. A run no one started before
// its expiry is answered 503, nothing run (the gateway leaves the marker
// "gateway:expired" for executors to skip it).
//
// Queue bound: a tenant whose effective quota has max_queued (read from
// the run's admission in its context, quota.FromContext) gets at most that
// many runs in {t:T}:queued; the check, the purge of expired members and
// the add are one script, so gateways share the bound. Beyond it Run
// returns a *quota.ExceededError (kind max_queued) and queues nothing.
package dispatch
