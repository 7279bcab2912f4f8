package dispatch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/secrets"
)

const dispatchSecret = "rk_live_7Hq2Wm9Xp4Ln8Vb3-dispatch"

func TestSealedSecretsOpenOnlyForTheirRunAndExecutor(t *testing.T) {
	vals := []secrets.Value{secrets.NewValue("A", dispatchSecret), secrets.NewValue("B", "second-value")}
	key, err := secretKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := sealSecrets(vals, key.PublicKey().Bytes(), "run-1", "ex-a")
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := json.Marshal(sealed)
	if bytes.Contains(enc, []byte("dispatch")) || bytes.Contains(enc, []byte("second-value")) {
		t.Fatalf("the sealed secrets show a value: %s", enc)
	}
	got, err := openSecrets(sealed, key, []string{"A", "B"}, "run-1", "ex-a")
	if err != nil || len(got) != 2 || got[0].Reveal() != dispatchSecret || got[1].Name() != "B" {
		t.Fatalf("openSecrets = %v, %v", got, err)
	}
	other, _ := secretKeyPair()
	tampered := *sealed
	tampered.Box = append([]byte{}, sealed.Box...)
	tampered.Box[0] ^= 1
	for name, open := range map[string]func() error{
		"another executor's key": func() error { _, err := openSecrets(sealed, other, []string{"A", "B"}, "run-1", "ex-a"); return err },
		"another run":            func() error { _, err := openSecrets(sealed, key, []string{"A", "B"}, "run-2", "ex-a"); return err },
		"another executor id":    func() error { _, err := openSecrets(sealed, key, []string{"A", "B"}, "run-1", "ex-b"); return err },
		"an altered box":         func() error { _, err := openSecrets(&tampered, key, []string{"A", "B"}, "run-1", "ex-a"); return err },
		"other names":            func() error { _, err := openSecrets(sealed, key, []string{"A", "C"}, "run-1", "ex-a"); return err },
		"nothing sent":           func() error { _, err := openSecrets(nil, key, []string{"A"}, "run-1", "ex-a"); return err },
	} {
		if err := open(); err == nil || !strings.Contains(err.Error(), errSecretsNotIntact.Error()) {
			t.Errorf("%s: openSecrets = %v", name, err)
		}
	}
	if _, err := sealSecrets(vals, []byte("short"), "run-1", "ex-a"); err == nil {
		t.Error("sealed to a key that is no X25519 key")
	}
}

// TestDispatchedSecretsNeverCrossRedisInClear runs a job with a secret
// through a real Dispatcher and Executor over a real redis-server: the
// executor's runner gets the value, the gateway gets everything back
// masked, and no key of Redis (strings, lists, streams, sets), while the
// run holds the secret or after, holds a piece of it.
func TestDispatchedSecretsNeverCrossRedisInClear(t *testing.T) {
	rdb := newRedis(t)
	holding, release := make(chan struct{}), make(chan struct{})
	run := &countingRunner{fn: func(_ context.Context, spec sandbox.Spec) sandbox.Result {
		v := "none"
		if len(spec.Secrets) == 1 {
			v = spec.Secrets[0].Reveal()
		}
		spec.Output(sandbox.StreamStdout, []byte("live: "+v[:8]))
		close(holding)
		<-release
		spec.Output(sandbox.StreamStdout, []byte(v[8:]+"\n"))
		res, _ := json.Marshal(map[string]string{"leak": v})
		return sandbox.Result{Status: sandbox.StatusOK, Result: res, Stdout: "live: " + v + "\n", Logs: []sandbox.LogLine{{Level: "info", Message: v}}}
	}}
	d := startPair(t, rdb, run)
	// Every command any client sends Redis, as the server sees it.
	mon := newRedisMonitor(t, rdb)
	var mu sync.Mutex
	var live bytes.Buffer
	spec := testJob("").Spec.spec()
	spec.Secrets = []secrets.Value{secrets.NewValue("API_KEY", dispatchSecret)}
	spec.Output = func(_ string, p []byte) { mu.Lock(); live.Write(p); mu.Unlock() }
	type out struct {
		res sandbox.Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := d.Run(context.Background(), spec)
		done <- out{res, err}
	}()
	select {
	case <-holding:
	case o := <-done:
		t.Fatalf("the run ended before it held its secret: %+v %v", o.res, o.err)
	}
	scanRedis(t, rdb, "while the run holds it")
	close(release)
	o := <-done
	if o.err != nil || o.res.Status != sandbox.StatusOK {
		t.Fatalf("Run = %+v, %v", o.res, o.err)
	}
	if got := run.runs[0].Secrets; len(got) != 1 || got[0].Name() != "API_KEY" || got[0].Reveal() != dispatchSecret {
		t.Fatalf("the executor's runner got %v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if string(o.res.Result) != `{"leak":"***"}` || o.res.Stdout != "live: ***\n" || o.res.Logs[0].Message != "***" || live.String() != "live: ***\n" {
		t.Errorf("result %s stdout %q logs %+v live %q", o.res.Result, o.res.Stdout, o.res.Logs, live.String())
	}
	scanRedis(t, rdb, "after the run")
	sent := mon.stop()
	if leaks(sent) {
		t.Errorf("a command sent to Redis held the secret (or its base64)")
	}
	// The monitor saw the run's job, its start with the executor's key
	// and the confirmation with the sealed values.
	for _, want := range []string{`\"secrets\":[\"API_KEY\"]`, "secrets_key", `\"box\"`} {
		if !strings.Contains(sent, want) {
			t.Errorf("the commands sent to Redis lack %s:\n%.3000s", want, sent)
		}
	}
}

// redisMonitor collects what MONITOR shows, over a connection of its
// own (one line per command any client sends).
type redisMonitor struct {
	conn net.Conn
	done chan struct{}
	mu   sync.Mutex
	all  strings.Builder
}

func newRedisMonitor(t *testing.T, rdb *redis.Client) *redisMonitor {
	t.Helper()
	conn, err := net.Dial("tcp", rdb.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	m := &redisMonitor{conn: conn, done: make(chan struct{})}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	if !sc.Scan() || sc.Text() != "+OK" {
		t.Fatalf("MONITOR: %q %v", sc.Text(), sc.Err())
	}
	go func() {
		defer close(m.done)
		for sc.Scan() {
			m.mu.Lock()
			m.all.WriteString(sc.Text() + "\n")
			m.mu.Unlock()
		}
	}()
	return m
}

func (m *redisMonitor) stop() string {
	time.Sleep(100 * time.Millisecond) // the last commands reach the monitor
	m.conn.Close()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.all.String()
}

// leaks reports whether s holds a piece of the secret, or of its base64
// (live output chunks cross Redis base64-encoded).
func leaks(s string) bool { return leaksOf(dispatchSecret, s) }

func leaksOf(secret, s string) bool {
	pieces := secrets.NewMasker([]secrets.Value{secrets.NewValue("A", secret[:8]), secrets.NewValue("B", secret[8:])})
	return pieces.Contains(s)
}

// scanRedis fails when any value of any key holds a piece of the secret.
func scanRedis(t *testing.T, rdb *redis.Client, when string) {
	scanRedisFor(t, rdb, when, dispatchSecret)
}

func scanRedisFor(t *testing.T, rdb *redis.Client, when, secret string) {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, k := range keys {
		typ, _ := rdb.Type(ctx, k).Result()
		var vals []string
		switch typ {
		case "string":
			v, _ := rdb.Get(ctx, k).Result()
			vals = append(vals, v)
		case "list":
			vals, _ = rdb.LRange(ctx, k, 0, -1).Result()
		case "set":
			vals, _ = rdb.SMembers(ctx, k).Result()
		case "zset":
			vals, _ = rdb.ZRange(ctx, k, 0, -1).Result()
		case "hash":
			m, _ := rdb.HGetAll(ctx, k).Result()
			for f, v := range m {
				vals = append(vals, f, v)
			}
		case "stream":
			msgs, _ := rdb.XRange(ctx, k, "-", "+").Result()
			for _, m := range msgs {
				vals = append(vals, fmt.Sprint(m.Values))
			}
		}
		for _, v := range vals {
			if leaksOf(secret, v) {
				t.Errorf("%s: Redis key %s (%s) holds the secret: %.200q", when, k, typ, v)
			}
		}
		seen = append(seen, k)
	}
	// The scan saw the run's keys (its job stream, its executor).
	if !strings.Contains(strings.Join(seen, " "), ":dispatch:runs") {
		t.Errorf("%s: the scan saw no run stream among %v", when, seen)
	}
}
