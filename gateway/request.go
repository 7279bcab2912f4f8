package gateway

import (
	"sort"

	"github.com/execgate/execgate/policy"
)

// DecodeExecuteRequest decodes an execute request body exactly as POST
// /v1/execute does under cfg's caps (zero fields: the defaults): strict,
// every error naming the field, defaults filled. `execgate policy eval`
// reads its input through it, so the CLI and the gateway cannot disagree
// about a body.
func DecodeExecuteRequest(cfg Config, body []byte) (*ExecuteRequest, error) {
	cfg = cfg.WithDefaults()
	if int64(len(body)) > cfg.MaxBodyBytes {
		return nil, tooLarge("body", int64(len(body)), cfg.MaxBodyBytes)
	}
	return decodeExecute(body, caps{body: cfg.MaxBodyBytes, source: cfg.MaxSourceBytes, args: cfg.MaxArgsBytes, depth: cfg.MaxJSONDepth})
}

// withDefaults fills what r left out with the policy's request defaults
// (policy.Request.WithDefaults: language python, entrypoint run, network
// none, mode run). The decoders call it once; nothing below re-defaults.
func (r *ExecuteRequest) withDefaults() {
	d := policy.Request{Language: r.Language, Entrypoint: r.Entrypoint, NetworkAccess: r.NetworkAccess, Mode: r.Mode}.WithDefaults()
	r.Language, r.Entrypoint, r.NetworkAccess, r.Mode = d.Language, d.Entrypoint, d.NetworkAccess, d.Mode
}

// PolicyRequest is what the policy sees of r: its fields, and as tools the
// ones it narrows to plus, in test mode, the fixture tools it answers
// (policy.BuildInput hashes and measures the source and args; they never
// enter the input). The gateway's execute and dry-run paths and `execgate
// policy eval` all map a request through it.
func (r *ExecuteRequest) PolicyRequest() policy.Request {
	tools := append(make([]string, 0, len(r.Tools)), r.Tools...)
	if r.Fixtures != nil && r.Mode == "test" {
		for name := range r.Fixtures.Tools {
			tools = append(tools, name)
		}
		sort.Strings(tools)
	}
	preq := policy.Request{
		Language:      r.Language,
		Entrypoint:    r.Entrypoint,
		Source:        r.Source,
		Args:          r.Args,
		Requirements:  r.Requirements,
		NetworkAccess: r.NetworkAccess,
		Limits:        r.Limits,
		Mode:          r.Mode,
		Tools:         tools,
	}
	if r.Egress != nil {
		preq.EgressAllow = r.Egress.Allow
	}
	return preq
}
