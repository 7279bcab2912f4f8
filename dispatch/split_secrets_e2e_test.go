package dispatch

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Brokered secrets in split mode, as deployed (separate gateway and
// executor processes, a real redis-server, nsjail): the gateway alone
// reads the secret; it reaches the executor's run sealed; no command any
// process sends the dispatch Redis holds it, nor any key afterwards, nor
// any process's log or the audit log.
func TestSplitSecretsReachTheRunSealed(t *testing.T) {
	const secret = "sk_split_9Ym3Qx71-Vb28Kd55-value"
	e := newSplitEnv(t)
	dir := filepath.Join(e.dir, "secrets")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "api-key"), secret+"\n")
	e.gatewayExtra = "tools_api: {secret_dirs: [" + dir + "]}\n"
	e.policyExtra = ", secrets: [API_KEY]"
	e.tenantExtra = "    secrets: { API_KEY: { file: " + filepath.Join(dir, "api-key") + " } }\n"
	mon := newRedisMonitor(t, e.rdb)
	e.startGateway()
	e.startExecutor("ex-a")
	waitFor(t, 30*time.Second, "/readyz naming the executor", func() bool {
		code, r := e.readyz()
		ok, detail, _ := r.check("executors")
		return code == 200 && ok && strings.Contains(detail, "ex-a")
	})

	src := "import sys, time\ndef run(args, context):\n    v = context.secrets['API_KEY']\n" +
		"    with open('/run/execgate/secrets/API_KEY') as f:\n        same = f.read() == v\n" +
		"    sys.stdout.write(v[:12]); sys.stdout.flush(); time.sleep(1); print(v[12:], flush=True)\n" +
		"    context.log(v)\n    context.artifacts.save('k-' + v + '.txt', 'is ' + v)\n    return {'leak': v, 'same': same}\n"
	s := e.executeSSE(map[string]any{"execution_id": "split-secret", "source": src, "secrets": []string{"API_KEY"}, "limits": map[string]any{"timeout_ms": 20000}})
	stdout, env := s.end(t)
	if env.Status != "ok" || string(env.Result) != `{"leak":"***","same":true}` || env.Stdout != "***\n" || stdout != "***\n" {
		t.Fatalf("envelope %+v result %s, live stdout %q", env, env.Result, stdout)
	}
	if leaksOf(secret, stdout) {
		t.Errorf("the live output holds the secret: %q", stdout)
	}
	sent := mon.stop()
	if leaksOf(secret, sent) {
		t.Errorf("a command sent to the dispatch Redis held the secret (or its base64)")
	}
	// The artifact crossed in the executor's reply, masked there (name
	// and content), and is served masked.
	for _, want := range []string{`\"secrets\":[\"API_KEY\"]`, "secrets_key", `\"box\"`, "k-***.txt"} {
		if !strings.Contains(sent, want) {
			t.Errorf("the commands sent to Redis lack %s: the run did not go the sealed way", want)
		}
	}
	if raw := e.getRaw(t, "/v1/executions/split-secret/artifacts/k-***.txt"); raw.status != http.StatusOK || string(raw.body) != "is ***" {
		t.Errorf("GET the artifact: %d %q", raw.status, raw.body)
	}
	scanRedisFor(t, e.rdb, "after the run", secret)
	audit, _ := os.ReadFile(e.audit)
	for where, text := range map[string]string{"the gateway's log": e.gw.logs.String(), "the executor's log": e.execs["ex-a"].logs.String(), "the audit log": string(audit)} {
		if leaksOf(secret, text) {
			t.Errorf("%s holds the secret", where)
		}
	}
	if !strings.Contains(string(audit), `"secrets":["API_KEY"]`) {
		t.Errorf("the audit record does not name the run's secret")
	}
	// The executor holds no tenant config, so no secret reference: the
	// value came from the gateway.
	if cfg, err := os.ReadFile(filepath.Join(e.dir, "ex-a.yaml")); err != nil || strings.Contains(string(cfg), "tenants") || strings.Contains(string(cfg), dir) {
		t.Errorf("the executor's config (%v):\n%s", err, cfg)
	}
}
