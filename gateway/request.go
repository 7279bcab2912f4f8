package gateway

import (
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

// withRequestDefaults fills what r left out with the policy's request
// defaults (policy.Request.WithDefaults: language python, entrypoint run,
// network none, mode run). The decoders call it once; nothing below
// re-defaults.
func withRequestDefaults(r *ExecuteRequest) {
	d := policy.Request{Language: r.Language, Entrypoint: r.Entrypoint, NetworkAccess: r.NetworkAccess, Mode: r.Mode, Isolation: r.Isolation}.WithDefaults()
	r.Language, r.Entrypoint, r.NetworkAccess, r.Mode, r.Isolation = d.Language, d.Entrypoint, d.NetworkAccess, d.Mode, d.Isolation
}
