package app_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/secrets"
	"github.com/execgate/execgate/tenancy"
)

// Brokered secrets through the real gateway, nsjail and Redis (issue #24
// item 5): tenant config, policy grant, delivery in the jail at both levels
// and in both languages, and the value nowhere else.

const (
	appSecret   = "pk_live_Xq81Zr42-Lm93Wv07-brokered"
	appEnvValue = "env-db-password-5fK2pQ9z"
)

// appSecretPieces are what must never be found: either half of each
// value, and their base64.
var appSecretPieces = secrets.NewMasker([]secrets.Value{
	secrets.NewValue("a", appSecret[:16]), secrets.NewValue("b", appSecret[16:]),
	secrets.NewValue("c", appEnvValue[:12]), secrets.NewValue("d", appEnvValue[12:]),
	secrets.NewValue("e", "fixture-stand-in-value"),
})

func findSecret(t *testing.T, where string, b []byte) {
	t.Helper()
	if appSecretPieces.Contains(string(b)) {
		t.Errorf("%s holds a secret: %.2000s", where, b)
	}
}

// okSecretRun executes body, wants a 200 "ok" envelope without a secret
// in it, and returns the envelope.
func okSecretRun(t *testing.T, s *server, token string, body map[string]any) map[string]any {
	t.Helper()
	r := s.execute(token, body)
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	findSecret(t, "the envelope", r.body)
	env := r.json(t)
	if env["status"] != "ok" {
		t.Fatalf("envelope %s", r.body)
	}
	return env
}

// secretsServer is a gateway whose tenant acme has API_KEY (a file below
// tools_api.secret_dirs) and DB_PASSWORD (a variable), grants both, and
// runs at level process too; quotas and async results live in Redis.
func secretsServer(t *testing.T) (*server, string, *testenv.RedisServer) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "api-key")
	if err := os.WriteFile(file, []byte(appSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TOOL_SECRET_DB", appEnvValue)
	rds := testenv.Redis(t)
	s := start(t, setup{mutate: func(c *config.Config) {
		c.Quota.Backend, c.Quota.RedisURL = "redis", rds.URL()
		c.ToolsAPI.SecretDirs = []string{dir}
		for i := range c.Tenants {
			if c.Tenants[i].ID != "acme" {
				continue
			}
			c.Tenants[i].Policy["isolation"] = []any{"jail", "process"}
			c.Tenants[i].Policy["languages"] = []any{"python", "javascript", "typescript"}
			c.Tenants[i].Policy["secrets"] = []any{"API_KEY", "DB_PASSWORD", "GONE"}
			c.Tenants[i].Secrets = secrets.Config{
				"API_KEY":     {File: file},
				"DB_PASSWORD": {Env: "TOOL_SECRET_DB"},
				"GONE":        {File: filepath.Join(dir, "gone")},
				"UNGRANTED":   {File: file},
			}
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("the test's config: %v", err)
		}
	}})
	return s, file, rds
}

const pySecretsTool = `
import base64, hashlib, json, os, sys, time
def run(args, context):
    v, db = context.secrets["API_KEY"], context.secrets["DB_PASSWORD"]
    with open("/run/execgate/secrets/API_KEY") as f:
        from_file = f.read()
    try:
        context.secrets["UNGRANTED"]
        ungranted = "present"
    except KeyError:
        ungranted = "absent"
    print("key", v, "db", db)
    sys.stdout.write(v[:16]); sys.stdout.flush(); time.sleep(0.5); print(v[16:])
    print(base64.b64encode(v.encode()).decode(), json.dumps([v]))
    print(v, file=sys.stderr)
    context.log("logged " + v)
    if args.get("raise"):
        raise RuntimeError("failing with " + v)
    return {"leak": [v, db], "same": from_file == v, "sha": hashlib.sha256(v.encode()).hexdigest(),
            "files": sorted(os.listdir("/run/execgate/secrets")), "ungranted": ungranted}
`

const jsSecretsTool = `
export function run(args, context) {
  const v = context.secrets.API_KEY, db = context.secrets["DB_PASSWORD"];
  console.log("key", v, "db", db);
  console.error(v);
  context.log("logged " + v);
  return { leak: [v, db], same: Deno.readTextFileSync("/run/execgate/secrets/API_KEY") === v,
           files: [...Deno.readDirSync("/run/execgate/secrets")].map((e) => e.name).sort(),
           ungranted: context.secrets.UNGRANTED === undefined ? "absent" : "present" };
}
`

// The artifacts tools leave the secret in an artifact's name and content:
// a file written to /workspace/out, one saved through context.artifacts
// and one too large to inline (fetched with GET).
const pyArtifactsTool = `
import json
def run(args, context):
    v = context.secrets["API_KEY"]
    with open("out/key-" + v + ".txt", "w") as f:
        f.write("the key is " + v + "\n")
    context.artifacts.save("saved.json", json.dumps({"k": v}))
    context.artifacts.save("big.txt", "x" * 100000 + v)
    return "done"
`

const jsArtifactsTool = `
export function run(args, context) {
  const v = context.secrets.API_KEY;
  Deno.writeTextFileSync("/workspace/out/key-" + v + ".txt", "the key is " + v + "\n");
  context.artifacts.save("saved.json", JSON.stringify({ k: v }).replace(":", ": "));
  context.artifacts.save("big.txt", "x".repeat(100000) + v);
  return "done";
}
`

func TestSecretsThroughTheGateway(t *testing.T) {
	testenv.Deno(t)
	s, file, rds := secretsServer(t)
	acme := s.token("acme")
	sum := sha256.Sum256([]byte(appSecret))
	for _, tc := range []struct{ name, language, isolation, source string }{
		{"python at level jail", "python", "jail", pySecretsTool},
		{"python at level process", "python", "process", pySecretsTool},
		{"javascript", "javascript", "jail", jsSecretsTool},
		{"typescript", "typescript", "jail", jsSecretsTool},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := okSecretRun(t, s, acme, map[string]any{"language": tc.language, "isolation": tc.isolation, "source": tc.source,
				"secrets": []string{"API_KEY", "DB_PASSWORD"}, "args": map[string]any{}, "limits": stretchedLimits()})
			res := env["result"].(map[string]any)
			if res["same"] != true || fmt.Sprint(res["files"]) != "[API_KEY DB_PASSWORD]" || res["ungranted"] != "absent" || fmt.Sprint(res["leak"]) != "[*** ***]" {
				t.Errorf("result %v", res)
			}
			if tc.language == "python" && res["sha"] != hex.EncodeToString(sum[:]) {
				t.Errorf("the tool's value has sha256 %v, want the file's", res["sha"])
			}
			if dec := env["decision"].(map[string]any); fmt.Sprint(dec["secrets"]) != "[API_KEY DB_PASSWORD]" || dec["isolation"] != tc.isolation {
				t.Errorf("decision %v", dec)
			}
			if u := env["usage"].(map[string]any); u["isolation"] != tc.isolation {
				t.Errorf("ran at %v", u["isolation"])
			}
			if !strings.Contains(env["stdout"].(string), "key *** db ***") || !strings.Contains(env["stderr"].(string), "***") {
				t.Errorf("stdout %q stderr %q", env["stdout"], env["stderr"])
			}
		})
	}
	t.Run("an exception's message and traceback", func(t *testing.T) {
		r := s.execute(acme, map[string]any{"source": pySecretsTool, "secrets": []string{"API_KEY", "DB_PASSWORD"}, "args": map[string]any{"raise": true}})
		findSecret(t, "the envelope", r.body)
		if e, _ := r.json(t)["error"].(map[string]any); e["type"] != "ToolError" || e["message"] != "RuntimeError: failing with ***" {
			t.Errorf("error %v", e)
		}
	})
	t.Run("a run that asks for none gets none", func(t *testing.T) {
		r := s.execute(acme, map[string]any{"source": "import os\ndef run(a, c):\n    return [dict(c.secrets), os.listdir('/run/execgate/secrets')]\n"})
		if r.status != 200 || !jsonEq(t, r.json(t)["result"], `[{}, []]`) {
			t.Errorf("%d %s", r.status, r.body)
		}
	})
	t.Run("a secret the policy does not grant is refused, named", func(t *testing.T) {
		r := s.execute(acme, map[string]any{"source": pySecretsTool, "secrets": []string{"API_KEY", "UNGRANTED"}})
		reasons, _ := r.json(t)["error"].(map[string]any)["reasons"].([]any)
		if r.status != 403 || r.errType(t) != "PolicyDenied" || fmt.Sprint(reasons) != `[secret "UNGRANTED" is not granted to tenant "acme"]` {
			t.Errorf("%d %s", r.status, r.body)
		}
		if r := s.execute(s.token("demo"), map[string]any{"source": pySecretsTool, "secrets": []string{"API_KEY"}}); r.status != 403 || !strings.Contains(string(r.body), `secret \"API_KEY\" is not granted to tenant \"demo\"`) {
			t.Errorf("another tenant asking for acme's secret: %d %s", r.status, r.body)
		}
	})
	t.Run("a granted secret that cannot be read is refused, named", func(t *testing.T) {
		r := s.execute(acme, map[string]any{"source": pySecretsTool, "secrets": []string{"GONE"}})
		if r.status != 503 || r.errType(t) != "SecretUnavailable" || !strings.Contains(string(r.body), `\"GONE\"`) || strings.Contains(string(r.body), filepath.Dir(file)) {
			t.Errorf("%d %s", r.status, r.body)
		}
	})
	t.Run("a rotated file is read at the next run", func(t *testing.T) {
		rotated := "pk_live_rotated-7Yx2-value"
		if err := os.WriteFile(file+".new", []byte(rotated+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".new", file); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.WriteFile(file, []byte(appSecret+"\n"), 0o600) })
		r := s.execute(acme, map[string]any{"source": "import hashlib\ndef run(a, c):\n    return hashlib.sha256(c.secrets['API_KEY'].encode()).hexdigest()\n", "secrets": []string{"API_KEY"}})
		want := sha256.Sum256([]byte(rotated))
		if r.json(t)["result"] != hex.EncodeToString(want[:]) {
			t.Errorf("after the rotation: %s", r.body)
		}
	})
	t.Run("test mode takes its secrets from the fixtures", func(t *testing.T) {
		r := s.execute(acme, map[string]any{"mode": "test", "source": "def run(a, c):\n    print(c.secrets['API_KEY'])\n    return c.secrets['API_KEY'] == 'fixture-stand-in-value'\n",
			"secrets": []string{"API_KEY"}, "fixtures": map[string]any{"secrets": map[string]string{"API_KEY": "fixture-stand-in-value"}}})
		findSecret(t, "the envelope", r.body)
		if env := r.json(t); env["result"] != true || env["stdout"] != "***\n" {
			t.Errorf("%s", r.body)
		}
		if r := s.execute(acme, map[string]any{"mode": "test", "source": "def run(a, c): return 1", "secrets": []string{"API_KEY"}}); r.status != 400 || !strings.Contains(string(r.body), "fixtures.secrets") {
			t.Errorf("test mode without a fixture: %d %s", r.status, r.body)
		}
	})
	t.Run("the dry run shows the grant", func(t *testing.T) {
		admin := s.token("acme", tenancy.RoleAdmin)
		r := s.do(http.MethodPost, "/v1/admin/policy/evaluate", admin, `{"tenant_id":"acme","roles":["executor"],"request":{"source":"x","secrets":["API_KEY"]}}`)
		body := r.json(t)
		if r.status != 200 || fmt.Sprint(body["decision"].(map[string]any)["secrets"]) != "[API_KEY]" ||
			fmt.Sprint(body["input"].(map[string]any)["request"].(map[string]any)["secrets"]) != "[API_KEY]" {
			t.Errorf("%d %s", r.status, r.body)
		}
		findSecret(t, "the dry run", r.body)
	})
	t.Run("over MCP (execute_python)", func(t *testing.T) {
		res, sc := callTool(t, mcpSession(t, s, acme), "execute_python", map[string]any{"source": pySecretsTool, "secrets": []string{"API_KEY", "DB_PASSWORD"}, "args": map[string]any{}})
		b, _ := json.Marshal(res)
		findSecret(t, "the MCP result", b)
		if sc["status"] != "ok" || !strings.Contains(toolText(res), "***") {
			t.Errorf("structured %v, text %q", sc, toolText(res))
		}
	})
	t.Run("artifacts: names, content, the envelope, GET, the store", func(t *testing.T) {
		for _, tc := range []struct{ name, language, isolation, source string }{
			{"python at level jail", "python", "jail", pyArtifactsTool},
			{"python at level process", "python", "process", pyArtifactsTool},
			{"javascript", "javascript", "jail", jsArtifactsTool},
		} {
			t.Run(tc.name, func(t *testing.T) {
				id := "secret-artifacts-" + tc.language + "-" + tc.isolation
				env := okSecretRun(t, s, acme, map[string]any{"execution_id": id, "language": tc.language, "isolation": tc.isolation, "source": tc.source,
					"secrets": []string{"API_KEY"}, "limits": stretchedLimits()})
				big := strings.Repeat("x", 100000) + "***"
				want := map[string]struct {
					data   string
					inline bool
				}{
					"key-***.txt": {"the key is ***\n", true},
					"saved.json":  {`{"k": "***"}`, true},
					"big.txt":     {big, false},
				}
				list, _ := env["artifacts"].([]any)
				if len(list) != len(want) {
					t.Fatalf("artifacts %v", list)
				}
				for _, a := range list {
					a := a.(map[string]any)
					name, _ := a["name"].(string)
					w, ok := want[name]
					if !ok {
						t.Errorf("artifact %v", a)
						continue
					}
					sum := sha256.Sum256([]byte(w.data))
					if a["bytes"] != float64(len(w.data)) || a["sha256"] != hex.EncodeToString(sum[:]) {
						t.Errorf("artifact %s = %v, want %d bytes masked", name, a, len(w.data))
					}
					if b64, inline := a["base64"].(string); inline != w.inline || (inline && b64 != base64.StdEncoding.EncodeToString([]byte(w.data))) {
						t.Errorf("artifact %s inline %q", name, b64)
					}
					got := s.fetchArtifact(t, acme, id, name, "")
					if got.status != http.StatusOK || string(got.body) != w.data {
						t.Errorf("GET artifact %s: %d %.200q", name, got.status, got.body)
					}
				}
			})
		}
	})
	t.Run("an async run: live output, the stored result, Redis", func(t *testing.T) {
		body, _ := json.Marshal(map[string]any{"execution_id": "secret-async", "source": pySecretsTool, "secrets": []string{"API_KEY", "DB_PASSWORD"},
			"args": map[string]any{}, "limits": stretchedLimits()})
		if r := s.do(http.MethodPost, "/v1/executions", acme, string(body)); r.status != http.StatusAccepted {
			t.Fatalf("submit: %d %s", r.status, r.body)
		}
		_, events := s.openEvents(http.MethodGet, "/v1/executions/secret-async/events", acme, "")
		var all bytes.Buffer
		for {
			e, ok := events.next()
			if !ok {
				break
			}
			all.Write(e.data)
			all.WriteByte('\n')
			findSecret(t, "an event "+e.kind, e.data)
		}
		if !strings.Contains(all.String(), `key *** db ***`) || !strings.Contains(all.String(), `"status":"ok"`) {
			t.Errorf("the events: %s", all.String())
		}
		stored := s.do(http.MethodGet, "/v1/executions/secret-async", acme, nil)
		findSecret(t, "the stored result", stored.body)
		if !strings.Contains(string(stored.body), `"leak":["***","***"]`) {
			t.Errorf("stored: %s", stored.body)
		}
		scanRedisFor(t, rds)
	})
	// Everything the gateway wrote: the audit log (names only), its log,
	// its spans, its state and work directories.
	audit, err := os.ReadFile(s.cfg.Audit.File)
	if err != nil {
		t.Fatal(err)
	}
	findSecret(t, "the audit log", audit)
	if !bytes.Contains(audit, []byte(`"secrets":["API_KEY","DB_PASSWORD"]`)) {
		t.Errorf("no audit record names the run's secrets")
	}
	findSecret(t, "the gateway's log", []byte(s.logs.String()))
	var spans bytes.Buffer
	for _, sp := range s.spans.Ended() {
		fmt.Fprintf(&spans, "%s %v %v %v\n", sp.Name(), sp.Attributes(), sp.Events(), sp.Status())
	}
	if spans.Len() == 0 {
		t.Error("no spans recorded")
	}
	findSecret(t, "the spans", spans.Bytes())
	for _, dir := range []string{s.cfg.StateDir, s.cfg.Sandbox.WorkDir} {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if b, err := os.ReadFile(p); err == nil {
					findSecret(t, p, b)
				}
			}
			return nil
		})
	}
}

// scanRedisFor fails when any value in Redis holds a secret.
func scanRedisFor(t *testing.T, rds *testenv.RedisServer) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: rds.Addr()})
	defer rdb.Close()
	ctx := t.Context()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys %v: %v", keys, err)
	}
	for _, k := range keys {
		dump, err := rdb.Dump(ctx, k).Result()
		if err != nil {
			continue // expired meanwhile
		}
		findSecret(t, "Redis key "+k, []byte(dump))
		// A dump may compress a value (LZF): the values themselves too.
		switch typ, _ := rdb.Type(ctx, k).Result(); typ {
		case "string":
			v, _ := rdb.Get(ctx, k).Result()
			findSecret(t, "Redis key "+k, []byte(v))
		case "hash":
			v, _ := rdb.HGetAll(ctx, k).Result()
			findSecret(t, "Redis hash "+k, []byte(fmt.Sprint(v)))
		case "zset":
			v, _ := rdb.ZRange(ctx, k, 0, -1).Result()
			findSecret(t, "Redis sorted set "+k, []byte(fmt.Sprint(v)))
		}
	}
}

func jsonEq(t *testing.T, got any, want string) bool {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(w)
	return string(a) == string(b)
}

// A tenant's secret file outside tools_api.secret_dirs stops the config
// from loading, naming it.
func TestSecretFileOutsideSecretDirsIsRefusedAtLoad(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	yaml := `tenants:
  - id: acme
    secrets:
      API_KEY: { file: /etc/shadow }
`
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(cfgFile, nil)
	if err == nil || !strings.Contains(err.Error(), "tenants[0].secrets.API_KEY.file: must lie below one of tools_api.secret_dirs") {
		t.Fatalf("Load = %v", err)
	}
}
