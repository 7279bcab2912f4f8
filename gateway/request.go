package gateway

import (
	"github.com/execgate/execgate/decode"
	"github.com/execgate/execgate/execution"
)

// DecodeExecuteRequest decodes an execute request body exactly as POST
// /v1/execute does under cfg's caps (zero fields: the defaults): strict,
// every error naming the field, defaults filled. `execgate policy eval`
// reads its input through it, so the CLI and the gateway cannot disagree
// about a body.
func DecodeExecuteRequest(cfg Config, body []byte) (*ExecuteRequest, error) {
	cfg = cfg.WithDefaults()
	if int64(len(body)) > cfg.MaxBodyBytes {
		return nil, execution.TooLarge("body", int64(len(body)), cfg.MaxBodyBytes)
	}
	return decode.Execute(body, cfg.caps())
}
