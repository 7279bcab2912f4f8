package decode

import (
	"maps"
	"slices"

	"github.com/execgate/execgate/execution"
)

// RequestFields names the fields each decoder takes, by the OpenAPI
// operation whose body it decodes (for openapi_test.go).
func RequestFields() map[string][]string {
	names := func(fs fieldFuncs, extra ...string) []string {
		return append(slices.Collect(maps.Keys(fs)), extra...)
	}
	var seen bool
	return map[string][]string{
		"execute": names(executeFields(&execution.Request{}, testCaps, &seen)),
		// POST /v1/executions takes callback_url (SplitCallback), then the
		// execute body.
		"submitExecution": names(executeFields(&execution.Request{}, testCaps, &seen), "callback_url"),
		"validate":        names(validateFields(&execution.ValidateRequest{}, testCaps)),
		"prepare":         names(prepareFields(&PrepareRequest{})),
	}
}
