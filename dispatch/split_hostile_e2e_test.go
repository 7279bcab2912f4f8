package dispatch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/toolbridge/toolbridgetest"
)

// The dispatch Redis as a hostile or failing party (issue #23): it loses
// its data mid-run, or someone who can write to it pushes values into a
// run's lists. The quota and the idempotency claims live in a Redis of
// their own (quota.redis_url), which keeps its data.

// markSource marks the run's key with one tool call (the side effect the
// test counts), printing around it.
const markSource = `import time
def run(args, context):
    print('before', flush=True)
    time.sleep(args.get('before', 0))
    r = context.tools.run('math.mark', {'key': args['k'], 'hold': args.get('hold', False)})
    print('marked', flush=True)
    time.sleep(args.get('after', 0))
    return {'k': args['k'], 'n': r['n']}
`

func newHostileEnv(t *testing.T) (*splitEnv, *toolbridgetest.Marks) {
	e := newSplitEnv(t)
	e.useDispatchRedis()
	e.toolAllow = "add, mark"
	e.queueTimeoutMS = 4000
	marks := toolbridgetest.AddMark(e.mcp)
	e.startGateway()
	e.startExecutorWith("ex-a", 1, 0)
	e.waitExecutor("ex-a")
	return e, marks
}

// waitExecutor waits until the executor's heartbeat is in the dispatch Redis.
func (e *splitEnv) waitExecutor(id string) {
	waitFor(e.t, 30*time.Second, id+"'s heartbeat", func() bool {
		n, err := e.rdb.Exists(context.Background(), newKeys("execgate").executor(id)).Result()
		return err == nil && n == 1
	})
}

// runID is the dispatch run id of an execution, from its executor's log.
func (e *splitEnv) runID(executionID string) string {
	var id string
	waitFor(e.t, 30*time.Second, "the run of "+executionID+" to start", func() bool {
		for _, p := range e.execs {
			for _, m := range logLines(p, "dispatch: run started") {
				if m["execution_id"] == executionID {
					id, _ = m["run_id"].(string)
					return true
				}
			}
		}
		return false
	})
	return id
}

// logged says whether an executor logged msg for the execution.
func (e *splitEnv) logged(msg, executionID string) bool {
	for _, p := range e.execs {
		for _, m := range logLines(p, msg) {
			if m["execution_id"] == executionID {
				return true
			}
		}
	}
	return false
}

// sse is a run followed with Accept: text/event-stream.
type sse struct {
	stdout chan string   // each stdout chunk
	env    chan envelope // the envelope, then closed
	err    chan error
}

func (e *splitEnv) executeSSE(body map[string]any) *sse {
	body["tenant_id"] = splitTenant
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, e.gwURL+"/v1/execute", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	s := &sse{stdout: make(chan string, 64), env: make(chan envelope, 1), err: make(chan error, 1)}
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			s.err <- err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			raw, _ := io.ReadAll(resp.Body)
			s.err <- fmt.Errorf("SSE answer %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), raw)
			return
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 8<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "stdout":
				var chunk struct{ Text string }
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &chunk)
				s.stdout <- chunk.Text
			case strings.HasPrefix(line, "data: ") && event == "envelope":
				var env envelope
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &env); err != nil {
					s.err <- err
					return
				}
				s.env <- env
				return
			}
		}
		s.err <- fmt.Errorf("the SSE stream ended without an envelope: %v", sc.Err())
	}()
	return s
}

// until reads stdout chunks until one contains want; it returns what it read.
func (s *sse) until(t *testing.T, want string) string {
	t.Helper()
	var got string
	deadline := time.After(60 * time.Second)
	for !strings.Contains(got, want) {
		select {
		case c := <-s.stdout:
			got += c
		case err := <-s.err:
			t.Fatalf("waiting for %q on stdout (so far %q): %v", want, got, err)
		case <-deadline:
			t.Fatalf("no %q on stdout within 60 s (so far %q)", want, got)
		}
	}
	return got
}

// end reads the rest: stdout and the envelope.
func (s *sse) end(t *testing.T) (string, envelope) {
	t.Helper()
	var got string
	deadline := time.After(90 * time.Second)
	for {
		select {
		case c := <-s.stdout:
			got += c
		case env := <-s.env:
			for {
				select {
				case c := <-s.stdout:
					got += c
				default:
					return got, env
				}
			}
		case err := <-s.err:
			t.Fatalf("reading the SSE stream (stdout so far %q): %v", got, err)
		case <-deadline:
			t.Fatalf("no envelope within 90 s (stdout so far %q)", got)
		}
	}
}

var redisPID = regexp.MustCompile(`(?m)^process_id:(\d+)`)

// signalDispatchRedis sends sig to the dispatch redis-server.
func (e *splitEnv) signalDispatchRedis(sig syscall.Signal) {
	info, err := e.rdb.Info(context.Background(), "server").Result()
	m := redisPID.FindStringSubmatch(info)
	if err != nil || m == nil {
		e.t.Fatalf("the dispatch Redis' pid: %v", err)
	}
	pid, _ := strconv.Atoi(m[1])
	if err := syscall.Kill(pid, sig); err != nil {
		e.t.Fatal(err)
	}
}

// loseDispatchData kills the dispatch Redis and starts it again empty (no
// persistence: --save ” --appendonly no), as a crash, a restart without
// persistence or a failover to a replica that had nothing yet would.
func (e *splitEnv) loseDispatchData() {
	e.dispatchRedis.Restart()
	if n, err := e.rdb.DBSize(context.Background()).Result(); err != nil || n > 10 {
		e.t.Fatalf("the dispatch Redis after the restart holds %d keys (%v)", n, err)
	}
}

// gatewayAnswered says whether the gateway logged its answer for the
// execution.
func gatewayAnswered(e *splitEnv, executionID string) bool {
	for _, m := range logLines(e.gw, "execution") {
		if m["execution_id"] == executionID {
			return true
		}
	}
	return false
}

// answer is one HTTP answer for an execution id.
type answer struct {
	status int
	env    envelope
}

func (a answer) String() string {
	msg := ""
	if a.env.Error != nil {
		msg = ": " + clip(a.env.Error.Message, 160)
	}
	return fmt.Sprintf("%d %s/%s%s", a.status, a.env.Status, a.env.errType(), msg)
}

// nothingRun: the answer says the run was not run (the caller may retry
// the id).
func (a answer) nothingRun() bool {
	return a.status == http.StatusServiceUnavailable && a.env.errType() == "SandboxUnavailable"
}

func TestSplitDispatchRedisLosingItsDataNeverRunsAnythingTwice(t *testing.T) {
	e, marks := newHostileEnv(t)
	rounds := 2
	if s := os.Getenv("EXECGATE_LOSS_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	k := newKeys("execgate")
	ctx := context.Background()
	type run struct {
		step   string
		id     string
		body   map[string]any
		first  answer
		counts int // marks when the first answer came
	}
	body := func(id string, args map[string]any) map[string]any {
		args["k"] = id
		return map[string]any{"execution_id": id, "source": markSource, "args": args, "limits": map[string]any{"timeout_ms": 30000}}
	}
	var runs []*run
	storedHits := 0
	// sync runs one execution and records its first answer.
	submit := func(step, id string, args map[string]any) chan *run {
		r := &run{step: step, id: id, body: body(id, args)}
		runs = append(runs, r)
		done := make(chan *run, 1)
		go func() {
			st, env, err := e.execute(r.body)
			if err != nil {
				t.Errorf("%s %s: %v", step, id, err)
			}
			r.first, r.counts = answer{st, env}, marks.Count(id)
			done <- r
		}()
		return done
	}
	for round := 0; round < rounds; round++ {
		p := fmt.Sprintf("loss%d-%d-", round, time.Now().UnixNano()%1e6)

		// Queued and in a tool call: the only slot is busy with a run held
		// inside its tool call, a second run waits in the stream.
		inCall := submit("in a tool call", p+"call", map[string]any{"hold": true})
		waitFor(t, 60*time.Second, "the held tool call", func() bool { return marks.Count(p+"call") == 1 })
		queued := submit("queued", p+"queued", map[string]any{})
		waitFor(t, 30*time.Second, "the second run queued", func() bool {
			n, _ := e.rdb.XLen(ctx, k.runsFor(limits.DefaultRuntime)).Result()
			return n >= 1
		})
		e.loseDispatchData()
		marks.Release(p + "call")
		<-inCall
		<-queued
		e.waitExecutor("ex-a")

		// Started: the run sleeps before its tool call.
		started := submit("started", p+"started", map[string]any{"before": 1.5})
		e.runID(p + "started")
		e.loseDispatchData()
		<-started

		// Replying, the reply stored and not yet read: the gateway is
		// stopped while the run answers. (On a loaded host the gateway may
		// read the reply before it is stopped: that round's run is then an
		// ordinary one, checked as such, and tried again.)
		for try := 0; try < 3; try++ {
			id := fmt.Sprintf("%sstored%d", p, try)
			b := body(id, map[string]any{"after": 2.0})
			s := e.executeSSE(b)
			rid := e.runID(id)
			s.until(t, "marked")
			if err := e.gw.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			// The reply stored, or the gateway answered first (if it was
			// stopped between the two, the wait ends without either).
			stored := false
			for deadline := time.Now().Add(30 * time.Second); !stored && !gatewayAnswered(e, id) && time.Now().Before(deadline); {
				n, _ := e.rdb.Exists(ctx, k.reply(rid)).Result()
				stored = n == 1
				time.Sleep(20 * time.Millisecond) // poll interval
			}
			hit := stored && !gatewayAnswered(e, id)
			if hit {
				e.loseDispatchData()
			}
			if err := e.gw.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			_, env := s.end(t)
			r := &run{step: "replying (stored)", id: id, body: b, first: answer{http.StatusOK, env}, counts: marks.Count(id)}
			if !hit {
				r.step = "replying (read before the gateway stopped)"
			}
			if env.errType() == "OutcomeUnknown" {
				r.first.status = http.StatusBadGateway // the stream's status is 200; the answer's is in the envelope
			}
			runs = append(runs, r)
			if hit {
				storedHits++
				break
			}
		}

		// Replying, the reply in flight: Redis stops before the executor
		// pushes it, and dies.
		flightBody := body(p+"flight", map[string]any{"after": 2.0})
		flight := e.executeSSE(flightBody)
		e.runID(p + "flight")
		flight.until(t, "marked")
		e.signalDispatchRedis(syscall.SIGSTOP)
		waitFor(t, 30*time.Second, "the executor to finish the run", func() bool { return e.logged("dispatch: ran", p+"flight") })
		e.loseDispatchData()
		_, env := flight.end(t)
		r := &run{step: "replying (in flight)", id: p + "flight", body: flightBody, first: answer{http.StatusOK, env}, counts: marks.Count(p + "flight")}
		if env.errType() == "OutcomeUnknown" {
			r.first.status = http.StatusBadGateway
		}
		runs = append(runs, r)
		e.waitExecutor("ex-a")
	}

	// Every caller retries with the same execution_id until the answer is
	// not "nothing was run", then once more.
	byStep := map[string]map[string]int{}
	for _, r := range runs {
		if r.first.nothingRun() && r.counts != 0 {
			t.Errorf("%s %s: answered %v, but its tool call had happened (%d marks)", r.step, r.id, r.first, r.counts)
		}
		last := r.first
		for attempt := 0; last.nothingRun(); attempt++ {
			if attempt == 10 {
				t.Fatalf("%s %s: still %v after 10 retries", r.step, r.id, last)
			}
			st, env, err := e.execute(r.body)
			if err != nil {
				t.Fatal(err)
			}
			last = answer{st, env}
		}
		st, env, err := e.execute(r.body)
		if err != nil {
			t.Fatal(err)
		}
		again := answer{st, env}
		if again.status != last.status || again.env.Status != last.env.Status || again.env.errType() != last.env.errType() {
			t.Errorf("%s %s: the repeat answered %v, the answer was %v", r.step, r.id, again, last)
		}
		if n := marks.Count(r.id); n > 1 {
			t.Errorf("%s %s: the tool ran %d times (first answer %v, last %v)", r.step, r.id, n, r.first, last)
		}
		starts, _ := e.startedBy()
		if n := len(starts[r.id]); n > 1 {
			t.Errorf("%s %s: started %d times", r.step, r.id, n)
		}
		if byStep[r.step] == nil {
			byStep[r.step] = map[string]int{}
		}
		byStep[r.step][r.first.String()[:strings.IndexByte(r.first.String()+":", ':')]]++
	}
	t.Logf("%d runs, first answers by step: %v", len(runs), byStep)
	if storedHits == 0 {
		t.Fatal("no round stopped the gateway before it read the reply")
	}
	// The case of the issue: a run that made its tool call and whose
	// reply Redis lost is never "nothing was run".
	for _, r := range runs {
		if strings.HasPrefix(r.step, "replying (stored)") && r.first.env.errType() != "OutcomeUnknown" {
			t.Errorf("%s %s: answered %v, want 502 OutcomeUnknown", r.step, r.id, r.first)
		}
	}
}

func TestSplitForgedOrReplayedFramesInARunsListsAreRefused(t *testing.T) {
	e, marks := newHostileEnv(t)
	ctx := context.Background()
	k := newKeys("execgate")
	id := fmt.Sprintf("frames-%d", time.Now().UnixNano()%1e6)
	s := e.executeSSE(map[string]any{"execution_id": id, "source": markSource,
		"args": map[string]any{"k": id, "hold": true}, "limits": map[string]any{"timeout_ms": 30000}})
	runID := e.runID(id)
	pre := s.until(t, "before")
	waitFor(t, 60*time.Second, "the held tool call", func() bool { return marks.Count(id) == 1 })

	real := signer{e.key}.forRun(runID)
	other := signer{e.key}.forRun(newRunID())
	wrong := signer{[]byte(strings.Repeat("w", 40))}.forRun(runID)
	seal := func(sig signer, domain string, v any) string {
		out, err := sealFrame(sig, domain, v)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	head := func(exec string, seq uint64) frameHead { return frameHead{RunID: runID, Executor: exec, Seq: seq} }
	call := func(h frameHead, key string) bridgeRequest {
		return bridgeRequest{frameHead: h, Op: "call", Name: "math.mark", Args: json.RawMessage(`{"key":"` + key + `"}`)}
	}
	chunk := func(h frameHead, text string) outputChunk {
		return outputChunk{frameHead: h, Stream: sandbox.StreamStdout, Data: []byte(text)}
	}
	bridge := []string{
		`{"n":2,"op":"call","name":"math.mark","args":{"key":"` + id + `-unsigned"}}`, // the format before signing
		seal(wrong, domainBridgeReq, call(head("ex-a", 2), id+"-wrongkey")),
		seal(other, domainBridgeReq, call(head("ex-a", 2), id+"-otherrun")),
		seal(real, domainBridgeReq, call(head("ex-evil", 2), id+"-otherexec")),
		seal(real, domainBridgeReq, call(head("ex-a", 1), id+"-replay")), // number 1 is the held call's
	}
	output := []string{
		`{"s":"stdout","d":"` + "SU5KRUNURUQtMQ==" + `"}`, // "INJECTED-1", unsigned
		seal(wrong, domainOutput, chunk(head("ex-a", 1000), "INJECTED-2")),
		seal(real, domainOutput, chunk(head("ex-a", 1), "INJECTED-3")), // a number already delivered
		seal(real, domainOutput, chunk(head("ex-evil", 1001), "INJECTED-4")),
	}
	forgedReply, _ := json.Marshal(Reply{V: WireVersion, RunID: runID, Executor: "ex-a", Result: &sandbox.Result{Status: sandbox.StatusOK, Result: json.RawMessage(`"forged"`)}})
	for _, v := range bridge {
		e.rdb.RPush(ctx, k.bridge(runID), v)
	}
	for _, v := range output {
		e.rdb.RPush(ctx, k.output(runID), v)
	}
	e.rdb.RPush(ctx, k.reply(runID), signer{[]byte(strings.Repeat("w", 40))}.seal(domainReply, forgedReply))
	e.rdb.RPush(ctx, k.start(runID), seal(wrong, domainStart, startFrame{frameHead: head("ex-evil", 0)}))
	// The held call's answer, forged before the gateway's comes.
	e.rdb.RPush(ctx, k.bridgeAnswer(runID, 1), seal(wrong, domainBridgeAnswer, bridgeAnswer{frameHead: head("ex-a", 1), Result: json.RawMessage(`{"n":99}`)}))

	want := len(bridge) + len(output) + 3
	var refused []map[string]any
	waitFor(t, 30*time.Second, fmt.Sprintf("%d refusals of run %s", want, runID), func() bool {
		refused = refused[:0]
		msgs, _ := e.rdb.XRange(ctx, k.refused(), "-", "+").Result()
		for _, m := range msgs {
			if m.Values["run_id"] == runID {
				refused = append(refused, m.Values)
			}
		}
		return len(refused) >= want
	})
	marks.Release(id)
	rest, env := s.end(t)
	stdout := pre + rest

	if env.Status != "ok" || string(env.Result) != fmt.Sprintf(`{"k": "%s", "n": 1}`, id) && string(env.Result) != fmt.Sprintf(`{"k":"%s","n":1}`, id) {
		t.Fatalf("envelope %s %s %+v: want the run's own answer (the tool's n 1, not the forged 99)", env.Status, env.Result, env.Error)
	}
	if strings.Contains(stdout, "INJECTED") || stdout != "before\nmarked\n" {
		t.Fatalf("stdout %q: want only the run's own", stdout)
	}
	for _, suffix := range []string{"-unsigned", "-wrongkey", "-otherrun", "-otherexec", "-replay"} {
		if n := marks.Count(id + suffix); n != 0 {
			t.Fatalf("a forged tool call (%s) was made %d times", suffix, n)
		}
	}
	if len(env.ToolCalls) != 1 || env.ToolCalls[0].Tool != "math.mark" {
		t.Fatalf("tool_calls %+v: want the one genuine call", env.ToolCalls)
	}
	reasons := map[string]int{}
	for _, r := range refused {
		why, _ := r["reason"].(string)
		frame, _ := r["frame"].(string)
		for _, w := range []string{"signature", "replay", "another executor"} {
			if strings.Contains(why, w) {
				reasons[frame+": "+w]++
			}
		}
	}
	for _, w := range []string{"bridge: signature", "bridge: replay", "bridge: another executor", "output: signature", "output: replay",
		"output: another executor", "reply: signature", "start: signature", "bridge answer: signature"} {
		if reasons[w] == 0 {
			t.Errorf("no refusal %q recorded; refusals: %v", w, refused)
		}
	}
	t.Logf("%d frames refused and recorded: %v", len(refused), reasons)
}
