package sandbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// recordingBridge is a hand-written Bridge: two tools, "math.add" and
// "text.upper", a denied "shell.exec", and a "slow.wait" that sleeps; it
// counts what reached it.
type recordingBridge struct {
	mu       sync.Mutex // guards calls
	calls    []string
	inflight atomic.Int32
	maxSeen  atomic.Int32
}

var bridgeTools = []sandbox.ToolInfo{
	{Name: "math.add", Description: "Add two numbers", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}}}`)},
	{Name: "text.upper", Description: "Upper-case a string", InputSchema: json.RawMessage(`{"type":"object"}`)},
	{Name: "slow.wait", Description: "Wait a while", InputSchema: json.RawMessage(`{"type":"object"}`)},
}

func (b *recordingBridge) Search(_ context.Context, q string, limit int) ([]sandbox.ToolInfo, error) {
	var out []sandbox.ToolInfo
	for _, t := range bridgeTools {
		if sandbox.ToolMatches(q, t) && len(out) < limit {
			out = append(out, sandbox.ToolInfo{Name: t.Name, Description: t.Description})
		}
	}
	return out, nil
}

func (b *recordingBridge) Describe(_ context.Context, name string) (sandbox.ToolInfo, error) {
	for _, t := range bridgeTools {
		if t.Name == name {
			return t, nil
		}
	}
	return sandbox.ToolInfo{}, &sandbox.ToolError{Type: sandbox.ErrToolDenied, Message: "not granted: " + name}
}

func (b *recordingBridge) Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	b.mu.Lock()
	b.calls = append(b.calls, name)
	b.mu.Unlock()
	n := b.inflight.Add(1)
	defer b.inflight.Add(-1)
	for {
		m := b.maxSeen.Load()
		if n <= m || b.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	var in map[string]any
	_ = json.Unmarshal(args, &in)
	switch name {
	case "math.add":
		return json.Marshal(map[string]any{"sum": in["a"].(float64) + in["b"].(float64)})
	case "text.upper":
		return json.Marshal(strings.ToUpper(in["s"].(string)))
	case "slow.wait":
		select {
		case <-time.After(200 * time.Millisecond):
			return json.RawMessage(`"waited"`), nil
		case <-ctx.Done():
			return nil, &sandbox.ToolError{Type: sandbox.ErrToolTimeout, Message: "deadline"}
		}
	case "fail.server":
		return nil, &sandbox.ToolError{Type: sandbox.ErrToolFailed, Message: "upstream said no"}
	case "broken":
		return nil, fmt.Errorf("dial tcp 10.0.0.1:443: secret-bearing detail")
	}
	return nil, &sandbox.ToolError{Type: sandbox.ErrToolDenied, Message: "tool " + name + " is not granted"}
}

func (b *recordingBridge) called() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.calls...)
}

func TestBridgeSearchDescribeRunFromTheJail(t *testing.T) {
	r := newRunner(t, nil)
	b := &recordingBridge{}
	src := `
from execgate_runtime import ToolDenied, ToolFailed, ToolUnavailable

def run(args, context):
    found = context.tools.search("add")
    schema = context.tools.describe("math.add")
    total = context.tools.run("math.add", {"a": 2, "b": 3})
    word = context.tools.run("text.upper", {"s": "hi"})
    errors = []
    for name in ("shell.exec", "fail.server", "broken"):
        try:
            context.tools.run(name, {})
        except (ToolDenied, ToolFailed, ToolUnavailable) as e:
            errors.append([type(e).__name__, e.reason])
    return {"found": found, "props": sorted(schema["input_schema"]["properties"]), "sum": total["sum"], "word": word, "errors": errors}
`
	res := run(t, r, sandbox.Spec{Source: src, Bridge: b, Limits: limits.Default})
	if res.Status != sandbox.StatusOK {
		t.Fatalf("%s", dump(res))
	}
	want := `{"found":[{"name":"math.add","description":"Add two numbers"}],"props":["a","b"],"sum":5,"word":"HI",` +
		`"errors":[["ToolDenied","tool shell.exec is not granted"],["ToolFailed","upstream said no"],["ToolUnavailable","the tool bridge could not answer"]]}`
	if string(res.Result) != want {
		t.Errorf("result\n%s\nwant\n%s", res.Result, want)
	}
	if got := strings.Join(b.called(), ","); got != "math.add,text.upper,shell.exec,fail.server,broken" {
		t.Errorf("calls reaching the bridge: %s", got)
	}
}

func TestBridgeRunAsyncOverlapsCalls(t *testing.T) {
	r := newRunner(t, nil)
	b := &recordingBridge{}
	src := `
import asyncio, time

async def run(args, context):
    t0 = time.monotonic()
    got = await asyncio.gather(*[context.tools.run_async("slow.wait", {}) for _ in range(4)])
    return {"got": got, "fast": time.monotonic() - t0 < 0.7}
`
	res := run(t, r, sandbox.Spec{Source: src, Bridge: b, Limits: limits.Default})
	if res.Status != sandbox.StatusOK || string(res.Result) != `{"got":["waited","waited","waited","waited"],"fast":true}` {
		t.Fatalf("%s", dump(res))
	}
	if b.maxSeen.Load() < 2 {
		t.Errorf("at most %d calls were in flight at once; run_async should overlap them", b.maxSeen.Load())
	}
}

func TestBridgeRunWithoutBridgeIsDenied(t *testing.T) {
	r := newRunner(t, nil)
	src := `
from execgate_runtime import ToolDenied

def run(args, context):
    try:
        context.tools.run("x.y", {})
    except ToolDenied as e:
        return [context.tools.search(""), e.reason]
`
	res := run(t, r, sandbox.Spec{Source: src, Limits: limits.Default})
	if res.Status != sandbox.StatusOK || !strings.Contains(string(res.Result), `[[],"tool \"x.y\" is not granted`) {
		t.Fatalf("%s", dump(res))
	}
}

func TestBridgeTestModeAnswersFromFixturesOnly(t *testing.T) {
	r := newRunner(t, nil)
	b := &recordingBridge{}
	src := `
from execgate_runtime import ToolDenied

def run(args, context):
    out = {"search": context.tools.search(""), "run": context.tools.run("crm.lookup", {"id": 7}),
           "attr": context.tools.weather(city="x")}
    try:
        context.tools.run("math.add", {"a": 1, "b": 2})
    except ToolDenied as e:
        out["missing"] = e.reason
    return out
`
	res := run(t, r, sandbox.Spec{Source: src, Mode: "test", Bridge: b,
		ToolFixtures: json.RawMessage(`{"crm.lookup": {"name": "Ada"}, "weather": "sunny"}`),
		Limits:       limits.Default})
	want := `{"search":[{"name":"crm.lookup","description":"test fixture"},{"name":"weather","description":"test fixture"}],"run":{"name":"Ada"},"attr":"sunny","missing":"tool \"math.add\" has no fixture in this test run"}`
	if res.Status != sandbox.StatusOK || string(res.Result) != want {
		t.Fatalf("want %s\n%s", want, dump(res))
	}
	if len(b.called()) != 0 {
		t.Errorf("test mode reached the run's real bridge: %v", b.called())
	}
	if len(res.ToolCalls) != 2 || res.ToolCalls[0].Tool != "crm.lookup" || res.ToolCalls[0].Outcome != "ok" || res.ToolCalls[1].Outcome != sandbox.ErrToolDenied {
		t.Errorf("tool calls %+v", res.ToolCalls)
	}
}

func TestBridgeOversizedRequestIsRefusedInTheJailAndAForgedFrameEndsTheChannel(t *testing.T) {
	r := newRunner(t, nil)
	b := &recordingBridge{}
	src := `
import os
from execgate_runtime import ToolDenied, ToolUnavailable

def run(args, context):
    out = []
    try:
        context.tools.run("math.add", {"a": 1, "b": 2, "pad": "x" * (2 << 20)})
    except ToolDenied as e:
        out.append("denied")
    out.append(context.tools.run("math.add", {"a": 1, "b": 2})["sum"])
    # A frame claiming 1 GiB: the runner closes the channel.
    os.write(5, (1 << 30).to_bytes(4, "big") + b"{}")
    try:
        context.tools.run("math.add", {"a": 1, "b": 2})
    except ToolUnavailable:
        out.append("closed")
    return out
`
	res := run(t, r, sandbox.Spec{Source: src, Bridge: b, Limits: limits.Default})
	if res.Status != sandbox.StatusOK || string(res.Result) != `["denied",3,"closed"]` {
		t.Fatalf("%s", dump(res))
	}
}

func TestBridgeIsClosedInForkedChildrenAndSubprocesses(t *testing.T) {
	r := newRunner(t, nil)
	src := `
import os, subprocess, sys

def run(args, context):
    pid = os.fork()
    if pid == 0:
        try:
            os.fstat(5)
            os._exit(1)
        except OSError:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    sub = subprocess.run([sys.executable, "-c", "import os\ntry:\n os.fstat(5)\n print('open')\nexcept OSError:\n print('closed')"], capture_output=True, text=True)
    return [os.waitstatus_to_exitcode(status), sub.stdout.strip()]
`
	res := run(t, r, sandbox.Spec{Source: src, Limits: sandbox.Limits{TimeoutMS: 10000}.Or(limits.Default)})
	if res.Status != sandbox.StatusOK || string(res.Result) != `[0,"closed"]` {
		t.Fatalf("%s", dump(res))
	}
}
