package app_test

import (
	"net/http"
	"testing"

	"github.com/execgate/execgate/internal/testenv"
)

// The units of the context's deadline, as documented: Python seconds (like
// time.time()), JavaScript and TypeScript milliseconds (like Date.now()).
// Tools rely on them, so a change of unit must fail here.
func TestTheContextDeadlineUnitsPerLanguage(t *testing.T) {
	testenv.Deno(t)
	s := start(t, setup{realSandbox: true})
	const timeoutMS = 30000 // the demo tenant's cap: the run starts well within it, even on a loaded host
	for _, tc := range []struct {
		lang, source string
		// unit is how many of the language's units make a second.
		unit float64
	}{
		{"python", "import time\n\ndef run(args, context):\n    left = context.remaining()\n    return {'remaining': left, 'deadline_minus_now': context.deadline - time.time()}\n", 1},
		{"javascript", "export function run(args, context) {\n  const left = context.remaining();\n  return {remaining: left, deadline_minus_now: context.deadline - Date.now()};\n}\n", 1000},
		{"typescript", "export function run(args: unknown, context: {remaining(): number, deadline: number}) {\n  const left = context.remaining();\n  return {remaining: left, deadline_minus_now: context.deadline - Date.now()};\n}\n", 1000},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			r := s.execute(s.token("demo"), map[string]any{"language": tc.lang, "source": tc.source, "limits": map[string]any{"timeout_ms": timeoutMS}})
			if r.status != http.StatusOK || r.json(t)["status"] != "ok" {
				t.Fatalf("%d %s", r.status, r.body)
			}
			res := r.json(t)["result"].(map[string]any)
			left, _ := res["remaining"].(float64)
			// Between a tenth of the timeout and all of it, in the unit.
			if max := timeoutMS / 1000.0 * tc.unit; left <= max/10 || left > max {
				t.Fatalf("remaining() = %v, want a value in (%v, %v]: %v units per second", left, max/10, max, tc.unit)
			}
			// deadline is the clock's now plus remaining(), in the same unit.
			if d, _ := res["deadline_minus_now"].(float64); d < left-tc.unit || d > left+tc.unit {
				t.Fatalf("deadline - now = %v, remaining() = %v: not the same clock and unit", d, left)
			}
		})
	}
}
