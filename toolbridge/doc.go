// Package toolbridge is the gateway side of code mode: it calls a tenant's
// MCP tool servers on behalf of a jailed run, and governs every call.
//
// A Hub holds, per tenant, the configured tool servers (tenants[].tools in
// the config file): one pooled MCP client session per server (official Go
// SDK, streamable HTTP), reconnected after a transport failure, with the
// server's tool list cached for a TTL and dropped on
// notifications/tools/list_changed. Header values come from secret files
// or environment variables of the gateway and never leave the Hub: not into
// the jail, the envelope, logs, spans or audit records.
//
// For each run the gateway asks the Hub for a Run (NewRun), a
// sandbox.Bridge that the sandbox serves into the jail. A Run lets through
// only the tools the run's decision granted (names or globs over
// "<server>.<tool>", and the server's own allow globs), decides every call
// again with the tool call policy (one decision of a run at a time, so the
// counts it decides on include every call allowed before, in flight or
// done), holds the run's limits (calls, lookups, concurrency, bytes in and
// out; the run's deadline bounds the time), charges the gateway CPU its
// requests cost (charge.go),
// validates the arguments against the tool's input schema before they
// leave the gateway, and records each call (span, metric, audit entry).
package toolbridge
