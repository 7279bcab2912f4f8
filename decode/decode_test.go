package decode

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/execgate/execgate/execution"
)

var testCaps = Caps{Body: 1 << 20, Source: 100, Args: 50}

func TestDecodeExecuteNamesTheField(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		status  int    // 0: decodes
		message string // substring of the error message
	}{
		{"the minimal request decodes with defaults", `{"source":"x"}`, 0, ""},
		{"the DESIGN probe decodes", `{"execution_id":"probe","tenant_id":"demo","source":"async def run(args, context):\n    return {\"ok\": True}\n","entrypoint":"run"}`, 0, ""},
		{"every field decodes", `{"execution_id":"a.b:c-1","tenant_id":"t","language":"python","source":"x","entrypoint":"main","args":{"a":[1,2]},"requirements":["six==1.16.0","requests[socks]==2.31.0"],"network_access":"proxy","egress":{"allow":["api.example.com:443","*.example.org"]},"limits":{"timeout_ms":1000,"cpu_ms":1,"memory_mb":64,"pids":4,"output_bytes":10,"tmp_mb":1},"mode":"test","fixtures":{"variables":{"k":"v"},"tools":{"search":[1]}}}`, 0, ""},
		{"null optional fields count as absent", `{"source":"x","args":null,"limits":null,"egress":null}`, 0, ""},

		{"malformed JSON", `{"source":`, 400, "body: is not valid JSON"},
		{"an empty body", ``, 400, "body: is empty"},
		{"a JSON array body", `["source"]`, 400, "body: must be a JSON object"},
		{"trailing data", `{"source":"x"} {}`, 400, "body: is not valid JSON"},
		{"an unknown top-level field", `{"source":"x","sauce":"y"}`, 400, "sauce: unknown field"},
		{"an unknown nested field", `{"source":"x","limits":{"timeout":5}}`, 400, "limits.timeout: unknown field"},
		{"an unknown fixtures field", `{"source":"x","mode":"test","fixtures":{"vars":{}}}`, 400, "fixtures.vars: unknown field"},
		{"a missing source", `{"entrypoint":"run"}`, 400, "source: is required"},
		{"an empty source", `{"source":""}`, 400, "source: is required"},
		{"source of the wrong type", `{"source":42}`, 400, "source: must be a string, got a number"},
		{"a NUL in the source", `{"source":"a\u0000b"}`, 400, "source: contains a NUL byte"},
		{"an entrypoint that is no identifier", `{"source":"x","entrypoint":"os.system"}`, 400, "entrypoint: \"os.system\" is not a Python identifier"},
		{"an execution_id with a newline", `{"source":"x","execution_id":"a\nb"}`, 400, "execution_id: must be"},
		{"an execution_id too long", `{"source":"x","execution_id":"` + strings.Repeat("a", 129) + `"}`, 400, "execution_id: must be"},
		{"an unknown language", `{"source":"x","language":"cobol"}`, 400, `language: "cobol" is not one of python, javascript, typescript`},
		{"an unknown network mode", `{"source":"x","network_access":"all"}`, 400, `network_access: "all" is not one of none, proxy, host`},
		{"an unknown mode", `{"source":"x","mode":"debug"}`, 400, `mode: "debug" is not one of run, test`},
		{"a negative limit", `{"source":"x","limits":{"memory_mb":-1}}`, 400, "limits.memory_mb: must be >= 0"},
		{"a fractional limit", `{"source":"x","limits":{"timeout_ms":1.5}}`, 400, "limits.timeout_ms: must be an integer, got 1.5"},
		{"a string limit", `{"source":"x","limits":{"pids":"8"}}`, 400, "limits.pids: must be an integer, got a string"},
		{"an absurd limit", `{"source":"x","limits":{"timeout_ms":99999999999}}`, 400, "limits.timeout_ms: 99999999999 is over the maximum"},
		{"limits of the wrong type", `{"source":"x","limits":[1]}`, 400, "limits: must be a JSON object"},
		{"a ranged requirement decodes (it is resolved)", `{"source":"x","requirements":["six>=1.16,<2","attrs[tests]"]}`, 0, ""},
		{"a requirement with a marker", `{"source":"x","requirements":["six; python_version>'3'"]}`, 400, `requirements[0]: "six; python_version>'3'" is not a requirement`},
		{"requirements and a lock together", `{"source":"x","requirements":["six"],"requirements_lock":"six==1.16.0 --hash=sha256:1e61c37477a1626458e36f7b1d82aa5c9b094fa4802892072e49de9c60c4c926"}`, 400, "requirements: give at most one of requirements, requirements_lock and environment_id"},
		{"a lock entry without a hash", `{"source":"x","requirements_lock":"six==1.16.0\n"}`, 400, "requirements_lock: six==1.16.0 has no --hash"},
		{"a lock with an option", `{"source":"x","requirements_lock":"--index-url https://evil.test\nsix==1.16.0 --hash=sha256:1e61c37477a1626458e36f7b1d82aa5c9b094fa4802892072e49de9c60c4c926"}`, 400, "requirements_lock: line"},
		{"an environment id that is not one", `{"source":"x","environment_id":"../x"}`, 400, "environment_id: must be the 64 hex digits"},
		{"a requirement with a URL", `{"source":"x","requirements":["evil @ https://x/y.whl"]}`, 400, "requirements[0]"},
		{"requirements of the wrong type", `{"source":"x","requirements":"six==1"}`, 400, "requirements: must be an array of strings, got a string"},
		{"a requirement of the wrong type", `{"source":"x","requirements":[1]}`, 400, "requirements[0]: must be a string, got a number"},
		{"an egress host with a bad port", `{"source":"x","network_access":"proxy","egress":{"allow":["a.example:99999"]}}`, 400, "egress.allow[0]: \"a.example:99999\" has an invalid port"},
		{"an egress host with a path", `{"source":"x","network_access":"proxy","egress":{"allow":["a.example/x"]}}`, 400, "egress.allow[0]"},
		{"a glob in the middle", `{"source":"x","network_access":"proxy","egress":{"allow":["a.*.example"]}}`, 400, "egress.allow[0]"},
		{"egress without proxy", `{"source":"x","egress":{"allow":["a.example"]}}`, 400, `egress.allow: only allowed with network_access "proxy"`},
		{"fixtures outside test mode", `{"source":"x","fixtures":{"variables":{}}}`, 400, `fixtures: only allowed with mode "test"`},
		{"fixture variables that are no object", `{"source":"x","mode":"test","fixtures":{"variables":[1]}}`, 400, "fixtures.variables: must be an object"},
		{"a bad fixture tool name", `{"source":"x","mode":"test","fixtures":{"tools":{"a b":1}}}`, 400, "fixtures.tools"},
		{"secrets by name", `{"source":"x","secrets":["API_KEY","db_pass"]}`, 0, ""},
		{"a secret name that is not an identifier", `{"source":"x","secrets":["API-KEY"]}`, 400, `secrets[0]: "API-KEY" is not a secret name`},
		{"a secret named twice", `{"source":"x","secrets":["A","B","A"]}`, 400, `secrets[2]: "A" is named twice`},
		{"too many secrets", `{"source":"x","secrets":["A0","A1","A2","A3","A4","A5","A6","A7","A8","A9","B0","B1","B2","B3","B4","B5","B6"]}`, 400, "secrets: has 17 secrets; at most 16"},
		{"secrets that are no list", `{"source":"x","secrets":"A"}`, 400, "secrets: must be an array of strings"},
		{"fixture secrets in test mode", `{"source":"x","mode":"test","secrets":["A"],"fixtures":{"secrets":{"A":"stand-in"}}}`, 0, ""},
		{"a test-mode secret without a fixture", `{"source":"x","mode":"test","secrets":["A","B"],"fixtures":{"secrets":{"A":"stand-in"}}}`, 400, `secrets[1]: "B" has no value in fixtures.secrets`},
		{"a fixture secret not asked for", `{"source":"x","mode":"test","secrets":["A"],"fixtures":{"secrets":{"A":"v1","B":"v2"}}}`, 400, "fixtures.secrets.B: is not asked for in secrets"},
		{"a fixture secret that is no string", `{"source":"x","mode":"test","secrets":["A"],"fixtures":{"secrets":{"A":1}}}`, 400, "fixtures.secrets.A: must be a string"},
		{"an empty fixture secret", `{"source":"x","mode":"test","secrets":["A"],"fixtures":{"secrets":{"A":""}}}`, 400, "fixtures.secrets.A: is empty"},
		{"a fixture secret with a NUL", `{"source":"x","mode":"test","secrets":["A"],"fixtures":{"secrets":{"A":"a\u0000b"}}}`, 400, "fixtures.secrets.A: the value holds the control character U+0000"},
		{"a fixture secret over the bound", `{"source":"x","mode":"test","secrets":["A"],"fixtures":{"secrets":{"A":"` + strings.Repeat("k", 4097) + `"}}}`, 413, "fixtures.secrets.A: 4097 bytes is over the 4096-byte cap"},

		{"a source over the cap", `{"source":"` + strings.Repeat("x", 101) + `"}`, 413, "source: 101 bytes is over the 100-byte cap"},
		{"args over the cap", `{"source":"x","args":"` + strings.Repeat("x", 60) + `"}`, 413, "args: 62 bytes is over the 50-byte cap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := Execute([]byte(tt.body), testCaps)
			if tt.status == 0 {
				if err != nil {
					t.Fatalf("Execute: %v", err)
				}
				if req.Language != "python" || req.Entrypoint == "" || req.NetworkAccess == "" || req.Mode == "" {
					t.Fatalf("defaults not applied: %+v", req)
				}
				return
			}
			var ae *execution.Error
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v, want an apiError", err)
			}
			if ae.Status != tt.status || !strings.Contains(ae.Message, tt.message) {
				t.Fatalf("got %d %q, want %d containing %q", ae.Status, ae.Message, tt.status, tt.message)
			}
			wantType := execution.TypeBadRequest
			if tt.status == http.StatusRequestEntityTooLarge {
				wantType = execution.TypePayloadTooLarge
			}
			if ae.Type != wantType {
				t.Fatalf("type = %s, want %s", ae.Type, wantType)
			}
		})
	}
}

func TestDecodeExecuteDefaultsAndCompaction(t *testing.T) {
	req, err := Execute([]byte(`{"source":"x","args":{ "b" : [1, 2] }}`), testCaps)
	if err != nil {
		t.Fatal(err)
	}
	if string(req.Args) != `{"b":[1,2]}` {
		t.Errorf("args = %s, want compacted", req.Args)
	}
	if req.Language != "python" || req.Entrypoint != "run" || req.NetworkAccess != "none" || req.Mode != "run" {
		t.Errorf("defaults = %+v", req)
	}
	a, _ := Execute([]byte(`{"source":"x","args":{"b":[1,2]}}`), testCaps)
	if execution.Fingerprint(a) != execution.Fingerprint(req) {
		t.Error("whitespace in args changed the idempotency fingerprint")
	}
	b, _ := Execute([]byte(`{"source":"y","args":{"b":[1,2]}}`), testCaps)
	if execution.Fingerprint(b) == execution.Fingerprint(req) {
		t.Error("another source has the same fingerprint")
	}
}

func TestDecodeQuota(t *testing.T) {
	l, err := Quota([]byte(`{"rate_per_minute":60,"burst":5,"concurrency":2,"daily_cpu_seconds":100,"max_queued":3}`))
	if err != nil || l.RatePerMinute != 60 || l.Burst != 5 || l.Concurrency != 2 || l.DailyCPUSeconds != 100 || l.MaxQueued != 3 {
		t.Fatalf("decodeQuota = %+v, %v", l, err)
	}
	for body, want := range map[string]string{
		`{"rate":1}`:            "rate: unknown field",
		`{"burst":-1}`:          "burst: must be >= 0",
		`{"concurrency":"two"}`: "concurrency: must be an integer",
		`{"max_queued":-1}`:     "max_queued: must be >= 0",
	} {
		if _, err := Quota([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Quota(%s) = %v, want %q", body, err, want)
		}
	}
}

func TestDecodeEvaluatePrefixesTheNestedField(t *testing.T) {
	_, _, _, err := Evaluate([]byte(`{"tenant_id":"demo","request":{"source":"x","limits":{"pids":-1}}}`), testCaps)
	if err == nil || !strings.Contains(err.Error(), "request.limits.pids: must be >= 0") {
		t.Fatalf("err = %v", err)
	}
	_, _, _, err = Evaluate([]byte(`{"tenant_id":"demo"}`), testCaps)
	if err == nil || !strings.Contains(err.Error(), "request: is required") {
		t.Fatalf("err = %v", err)
	}
	tenant, roles, req, err := Evaluate([]byte(`{"tenant_id":"demo","roles":["admin"],"request":{"source":"x"}}`), testCaps)
	if err != nil || tenant != "demo" || len(roles) != 1 || req.Source != "x" {
		t.Fatalf("decodeEvaluate = %q %v %+v %v", tenant, roles, req, err)
	}
}

func TestDecodeAcceptsJavaScriptAndTypeScript(t *testing.T) {
	for _, lang := range []string{"javascript", "typescript"} {
		req, err := Execute([]byte(`{"source":"export function run() {}","language":"`+lang+`"}`), testCaps)
		if err != nil || req.Language != lang {
			t.Errorf("%s: %+v, %v", lang, req, err)
		}
		v, err := Validate([]byte(`{"source":"x","language":"`+lang+`"}`), testCaps)
		if err != nil || v.Language != lang {
			t.Errorf("validate %s: %+v, %v", lang, v, err)
		}
	}
	if v, err := Validate([]byte(`{"source":"x"}`), testCaps); err != nil || v.Language != "python" {
		t.Errorf("validate default language: %+v, %v", v, err)
	}
	if _, err := Validate([]byte(`{"source":"x","language":"ruby"}`), testCaps); err == nil || !strings.Contains(err.Error(), "language") {
		t.Errorf("validate ruby: %v", err)
	}
}

// requirements and requirements_lock are read for the request's language:
// npm packages with exact versions and an npm lock for javascript and
// typescript, PEP 508 and pip's format for python; whichever order the
// fields come in.
func TestDecodePackagesFollowTheLanguage(t *testing.T) {
	const npmLock = `# execgate npm lock 1\nleft-pad@1.3.0 sha512-XI5MPzVNApjAyhQzphX8BkmKsKUxD4LdyK24iZeQEwqqXXI2kHHwWS6r+LyuOdsJdl8jLO6aqAa6i9v3cK/8nQ==\n`
	const pyLock = `six==1.16.0 --hash=sha256:1e61c37477a1626458e36f7b1d82aa5c9b094fa4802892072e49de9c60c4c926`
	for _, tc := range []struct {
		name, body, message string // message "": decodes
	}{
		{"npm requirements for javascript", `{"requirements":["left-pad@1.3.0","@scope/pkg@2.0.0-rc.1"],"language":"javascript","source":"x"}`, ""},
		{"npm requirements for typescript", `{"language":"typescript","source":"x","requirements":["left-pad@1.3.0"]}`, ""},
		{"an npm lock for javascript", `{"language":"javascript","source":"x","requirements_lock":"` + npmLock + `"}`, ""},
		{"a range for javascript", `{"language":"javascript","source":"x","requirements":["left-pad@^1.3.0"]}`, `requirements[0]: "left-pad@^1.3.0" is not an npm package with an exact version`},
		{"a PEP 508 requirement for javascript", `{"language":"javascript","source":"x","requirements":["six==1.16.0"]}`, `requirements[0]: "six==1.16.0" is not an npm package`},
		{"the npm: prefix", `{"language":"javascript","source":"x","requirements":["npm:left-pad@1.3.0"]}`, "without the npm: prefix"},
		{"a URL for javascript", `{"language":"javascript","source":"x","requirements":["x@https://evil.test/x.tgz"]}`, "requirements[0]"},
		{"an npm requirement for python", `{"source":"x","requirements":["left-pad@1.3.0"]}`, `requirements[0]: "left-pad@1.3.0" is not a requirement`},
		{"a Python lock for javascript", `{"language":"javascript","source":"x","requirements_lock":"` + pyLock + `"}`, "requirements_lock: a javascript run takes an npm lock"},
		{"an npm lock for python", `{"source":"x","requirements_lock":"` + npmLock + `"}`, "requirements_lock: an npm lock is for javascript and typescript runs, not python"},
		{"a broken npm lock", `{"language":"javascript","source":"x","requirements_lock":"# execgate npm lock 1\nleft-pad@1.3.0 sha1-abc\n"}`, "requirements_lock: line 2"},
		{"a requirement over 200 bytes", `{"language":"javascript","source":"x","requirements":["` + strings.Repeat("a", 201) + `@1.0.0"]}`, "requirements[0]: is 207 bytes; at most 200"},
		{"a runtime for javascript", `{"language":"javascript","source":"x","runtime":"python3.13","requirements":["left-pad@1.3.0"]}`, "runtime: only python runs name a runtime; javascript runs choose by language"},
		{"a runtime for python", `{"source":"x","runtime":"python3.13","requirements":["six==1.16.0"]}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Execute([]byte(tc.body), testCaps)
			if tc.message == "" {
				if err != nil {
					t.Fatalf("Execute: %v", err)
				}
				return
			}
			var ae *execution.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Message, tc.message) {
				t.Fatalf("got %v, want a 400 containing %q", err, tc.message)
			}
		})
	}
	t.Run("prepare takes a language", func(t *testing.T) {
		req, err := Prepare([]byte(`{"requirements":["left-pad@1.3.0"],"language":"javascript"}`), testCaps)
		if err != nil || req.Language != "javascript" {
			t.Fatalf("Prepare = %+v, %v", req, err)
		}
		req, err = Prepare([]byte(`{"requirements":["six==1.16.0"]}`), testCaps)
		if err != nil || req.Language != "python" {
			t.Fatalf("Prepare without a language = %+v, %v (want python)", req, err)
		}
		req, err = Prepare([]byte(`{"requirements":["six==1.16.0"],"runtime":"python3.13"}`), testCaps)
		if err != nil || req.Runtime != "python3.13" {
			t.Fatalf("Prepare with a Python runtime = %+v, %v", req, err)
		}
		for body, want := range map[string]string{
			`{"requirements":["left-pad@1.3.0"]}`:                                                `requirements[0]: "left-pad@1.3.0" is not a requirement`,
			`{"requirements":["six==1.16.0"],"language":"typescript"}`:                           "is not an npm package",
			`{"requirements":["x@1.0.0"],"language":"cobol"}`:                                    "language",
			`{"requirements":["left-pad@1.3.0"],"language":"javascript","runtime":"python3.13"}`: "runtime: only python runs name a runtime; javascript runs choose by language",
		} {
			var ae *execution.Error
			if _, err := Prepare([]byte(body), testCaps); !errors.As(err, &ae) || !strings.Contains(ae.Message, want) {
				t.Errorf("Prepare(%s) = %v, want a 400 containing %q", body, err, want)
			}
		}
	})
}
