package docgen

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/execgate/execgate/config"
)

var update = flag.Bool("update", false, "rewrite the generated pages of docs/")

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := RepoRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// The checked-in reference pages are exactly what the generator makes from
// the code: a config field or an OpenAPI change without regenerating fails.
func TestTheGeneratedPagesAreUpToDate(t *testing.T) {
	root := repoRoot(t)
	pages, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range pages {
		path := filepath.Join(root, name)
		got, err := os.ReadFile(path)
		if err == nil && string(got) == want {
			continue
		}
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s differs from what the generator makes (go test ./internal/docgen -update, or go run ./cmd/docgen)", name)
	}
}

// Every config key has a doc comment, and every key that holds a value
// (not an object of further keys) says its default or what zero means.
func TestEveryConfigFieldIsDocumented(t *testing.T) {
	keys, err := ConfigKeys(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) < 100 {
		t.Fatalf("only %d config keys found: the walk is broken", len(keys))
	}
	for _, k := range keys {
		switch {
		case k.Doc == "":
			t.Errorf("%s (%s) has no doc comment: say what it does, its unit, default and what zero means", k.Path, k.Field)
		case !k.Container && k.Default == "" && !strings.Contains(k.Doc, "Required"):
			t.Errorf("%s (%s): the doc comment states no default (a clause \"Default …\", \"Empty: …\", \"0: …\" or \"(default …)\", or \"Required\"): %q", k.Path, k.Field, k.Doc)
		}
	}
}

// The walk reaches every level: sections, nested objects, lists of objects
// and maps of objects, with the environment variable of each settable key.
func TestConfigKeysCoverTheComposedStructs(t *testing.T) {
	keys, err := ConfigKeys(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]Key{}
	for _, k := range keys {
		byPath[k.Path] = k
	}
	for path, want := range map[string]Key{
		"listen":                                        {Section: "", Type: "string", Default: "127.0.0.1:8010", Env: "EXECGATE_LISTEN"},
		"server.max_body_bytes":                         {Section: "server", Type: "integer", Unit: "bytes", Default: "1 MiB", Env: "EXECGATE_SERVER_MAX_BODY_BYTES"},
		"sandbox.zygotes.start_ms":                      {Section: "sandbox", Type: "integer", Unit: "milliseconds", Default: "10000", Env: "EXECGATE_SANDBOX_ZYGOTES_START_MS"},
		"quota.defaults.rate_per_minute":                {Section: "quota", Type: "integer", Unit: "per minute", Env: "EXECGATE_QUOTA_DEFAULTS_RATE_PER_MINUTE"},
		"tenants[].tools.servers[].timeout_ms":          {Section: "tenants", Type: "integer", Unit: "milliseconds", Default: "10000"},
		"tenants[].tools.servers[].headers.<name>.file": {Section: "tenants", Type: "string"},
		"policy.bundle.poll_seconds":                    {Section: "policy", Type: "integer", Unit: "seconds", Default: "30"},
	} {
		got, ok := byPath[path]
		if !ok {
			t.Errorf("%s: not found", path)
			continue
		}
		if got.Section != want.Section || got.Type != want.Type || got.Unit != want.Unit || got.Env != want.Env ||
			(want.Default != "" && got.Default != want.Default) {
			t.Errorf("%s = %+v, want %+v", path, got, want)
		}
	}
}

func TestDefaultOf(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"Caps the body. Default 1 MiB.", "1 MiB"},
		{"Tenants' share. Default 3/4 of the slots, rounded down, at least 1; the rest.", "3/4 of the slots, rounded down, at least 1"},
		{"The rootfs. Empty: <state_dir>/rootfs, built on first use.", "<state_dir>/rootfs, built on first use"},
		{"Rotates the file. Zero means the default, 100.", "100"},
		{"Exports traces. Default (nil): on when X is set.", "on when X is set"},
		{"Counts. Default (0) 100.", "100"},
		{"The rate. 0: unlimited.", "0 = unlimited"},
		{"Reloads on change (default true when dirs is set).", "true when dirs is set"},
		{"A format, e.g. json. Defaults: json.", "json"},
		{`Backend is "memory" (default) or "redis".`, "memory"},
		{`Selects "auto" (default: detect), "v1", "v2".`, "auto"},
		{"No default here.", ""},
	} {
		if got := defaultOf(c.doc); got != c.want {
			t.Errorf("defaultOf(%q) = %q, want %q", c.doc, got, c.want)
		}
	}
}

func TestEscapeTextKeepsCodeSpans(t *testing.T) {
	got := cell("a <b> *c* `x|<y>*` d|e\n f")
	want := "a &lt;b&gt; \\*c\\* `x|<y>*` d\\|e f"
	if got != want {
		t.Errorf("cell = %q, want %q", got, want)
	}
}

// The defaults the doc comments state are the code's, wherever the code
// sets them in a value this test can read without a host (config.Defaults
// and the exported WithDefaults of the sections that have one): a comment
// saying "Default 600" over a field that defaults to 300 fails.
func TestDocumentedDefaultsAreTheCodes(t *testing.T) {
	keys, err := ConfigKeys(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	eff := config.Defaults()
	eff.Server = eff.Server.WithDefaults()
	eff.Quota = eff.Quota.WithDefaults()
	eff.Dispatch = eff.Dispatch.WithDefaults()
	eff.ToolsAPI = eff.ToolsAPI.WithDefaults()
	root := reflect.ValueOf(eff)
	checked := 0
	for _, k := range keys {
		want, ok := plainNumber(k.Default)
		if !ok || strings.Contains(k.Path, "[]") {
			continue
		}
		v, ok := byPath(root, strings.Split(k.Path, "."))
		if !ok || !v.CanInt() || v.Int() == 0 {
			continue // defaulted where this test cannot see (a host value, an unexported default)
		}
		checked++
		if v.Int() != want {
			t.Errorf("%s: the doc comment says default %q, the code's default is %d", k.Path, k.Default, v.Int())
		}
	}
	if checked < 20 {
		t.Errorf("only %d defaults compared: the walk is broken", checked)
	}
}

// plainNumber reads a default such as "600", "1 MiB" or "256 KiB".
func plainNumber(s string) (int64, bool) {
	f := strings.Fields(s)
	if len(f) == 0 || len(f) > 2 {
		return 0, false
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, false
	}
	if len(f) == 2 {
		switch f[1] {
		case "KiB":
			n <<= 10
		case "MiB":
			n <<= 20
		default:
			return 0, false
		}
	}
	return n, true
}

// byPath finds the field of v at a YAML path.
func byPath(v reflect.Value, path []string) (reflect.Value, bool) {
	for _, name := range path {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return v, false
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return v, false
		}
		found := false
		for i := 0; i < v.NumField(); i++ {
			if strings.Split(v.Type().Field(i).Tag.Get("yaml"), ",")[0] == name {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return v, false
		}
	}
	return v, true
}
