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
// expiry, marks the run started with SET NX (the one place where "at most
// once" is decided), acknowledges and deletes the entry, runs it in its
// sandbox and pushes the signed result. Tool calls of a run travel back to
// the gateway that owns it on the run's bridge list (bridge.go).
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
//	P:dispatch:{R}:bridge          list: the run's tool requests (executor → gateway)
//	P:dispatch:{R}:bridge:N        list: the answer to request N (gateway → executor)
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
// {R}:started succeeds, before it runs anything. Entries read but not
// started (the executor died in between) are claimed by another executor
// with XAUTOCLAIM after 3 beats; their SET NX still decides. A run whose
// executor's heartbeat expires while the run is started and unanswered
// ends ExecutorLost at the gateway and is never run again; a run no one
// started before its expiry is taken by the gateway (SET NX
// "gateway:expired") and answered 503, nothing run.
//
// Queue bound: a tenant whose effective quota has max_queued (read from
// the run's admission in its context, quota.FromContext) gets at most that
// many runs in {t:T}:queued; the check, the purge of expired members and
// the add are one script, so gateways share the bound. Beyond it Run
// returns a *quota.ExceededError (kind max_queued) and queues nothing.
package dispatch
