package config

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// zeroIsTheValue lists the keys whose printed zero value is what the
// server really uses, each with why. A key printed as zero ("", 0, false,
// null, [] or {}) that is not here is a default config print does not
// show: fill it in Effective (or in the owning package's WithDefaults).
// Keys are dotted, list items [*]; a pattern's * segment matches any one
// segment.
var zeroIsTheValue = map[string]string{
	"auth.public_keys":                       "no PEM keys configured",
	"auth.jwks_url":                          "no JWKS configured",
	"sandbox.warm_pool":                      "0 disables the warm pool",
	"sandbox.package_index.url":              "empty: PyPI",
	"sandbox.debian_mirror":                  "empty: the lock's own archive URLs",
	"sandbox.package_index.find_links":       "none",
	"sandbox.package_index.no_index":         "the index is used",
	"sandbox.package_index.credentials_file": "no credentials",
	"sandbox.npm_registry.token_file":        "no token",
	"egress.allow_cidrs":                     "no private destination is opened",
	"egress.upstream_proxy":                  "direct connections",
	"quota.redis_url":                        "the memory backend",
	"quota.redis_addrs":                      "the memory backend",
	"quota.master_name":                      "no Sentinel",
	"quota.redis_cluster":                    "no cluster",
	"quota.redis_password_file":              "no password",
	"quota.defaults.max_queued":              "0: unbounded (role all has no dispatch queue)",
	"policy.dirs":                            "the embedded defaults only",
	"policy.bundle":                          "no bundle",
	"policy.watch":                           "nothing to watch without dirs or a bundle",
	"telemetry.tracing":                      "no OTLP endpoint in the environment",
	"telemetry.traces_stdout":                "spans are not written to stdout",
	"tenants":                                "none configured: every token is refused",
	"tenants[*].quota.max_queued":            "0: unbounded",
	"tenants[*].policy.*":                    "the tenant's policy data, given as is",
	"tenants[*].policy.*.*":                  "the tenant's policy data, given as is",
	"tenants[*].tools.servers":               "no tool servers",
	"tenants[*].tools.record_args":           "arguments are not recorded",
	"tenants[*].webhooks.secrets":            "no callbacks signed",
	"tenants[*].secrets":                     "no brokered secrets",
	"tenants[*].secrets.*.*":                 "a brokered secret is a file or an env variable; the other stays empty",
	"tenants[*].webhooks.secrets[*].*":       "a secret is a file or an env variable; the other stays empty",
	"dispatch.redis_url":                     "role all: no dispatch (it follows quota.redis_url)",
	"dispatch.spec_key_file":                 "role all: no dispatch",
	"dispatch.executor_id":                   "generated at start (hostname-pid-random)",
}

func TestConfigPrintShowsNoZeroWhereTheServerUsesADefault(t *testing.T) {
	for _, tc := range []struct{ name, file string }{
		{"the embedded default", ""},
		{"the shipped example", "../deploy/examples/config.yaml"},
		{"a file with only the required key", "testdata/minimal.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(tc.file, []string{"EXECGATE_STATE_DIR=/tmp/eg-print"})
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := cfg.Print(&buf); err != nil {
				t.Fatal(err)
			}
			var doc yaml.Node
			if err := yaml.Unmarshal(buf.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			var bad []string
			walkZeroLeaves(doc.Content[0], "", func(key, value string) {
				for pattern := range zeroIsTheValue {
					if matchKey(pattern, key) {
						return
					}
				}
				bad = append(bad, key+": "+value)
			})
			if len(bad) > 0 {
				t.Errorf("config print shows zero for keys the server defaults (fill them in Effective, or list them in zeroIsTheValue with why):\n  %s\n%s",
					strings.Join(bad, "\n  "), buf.String())
			}
		})
	}
}

func TestConfigPrintShowsTheDerivedDefaults(t *testing.T) {
	cfg, err := Load("", []string{"EXECGATE_STATE_DIR=/tmp/eg-print", "EXECGATE_SERVER_MAX_CONCURRENT_RUNS=3"})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := cfg.Print(&buf); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Server map[string]any `yaml:"server"`
	}
	if err := yaml.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	// 3/4 of the slots, half the queue, 3 runs' output reservations (292
	// MiB each at the platform's largest output and artifacts).
	for key, want := range map[string]int{"max_concurrent_runs": 3, "tenant_max_runs": 2, "tenant_max_queue": 32, "max_output_memory_mb": 876, "max_queue": 64} {
		if got.Server[key] != want {
			t.Errorf("server.%s = %v, want %d", key, got.Server[key], want)
		}
	}
	if cfg.Server.MaxQueue != 0 {
		t.Errorf("Print changed the loaded config: max_queue %d", cfg.Server.MaxQueue)
	}
}

// walkZeroLeaves calls zero for every leaf of n that is a zero value, with
// its dotted key (list items as [*]).
func walkZeroLeaves(n *yaml.Node, key string, zero func(key, value string)) {
	switch n.Kind {
	case yaml.MappingNode:
		if len(n.Content) == 0 {
			zero(key, "{}")
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if key != "" {
				k = key + "." + k
			}
			walkZeroLeaves(n.Content[i+1], k, zero)
		}
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			zero(key, "[]")
		}
		for _, c := range n.Content {
			walkZeroLeaves(c, key+"[*]", zero)
		}
	case yaml.ScalarNode:
		switch {
		case n.Tag == "!!null", n.Tag == "!!str" && n.Value == "",
			n.Tag == "!!int" && n.Value == "0", n.Tag == "!!float" && n.Value == "0",
			n.Tag == "!!bool" && n.Value == "false":
			zero(key, fmt.Sprintf("%q", n.Value))
		}
	}
}

// matchKey reports whether the dotted key matches pattern, whose *
// segments match any one segment.
func matchKey(pattern, key string) bool {
	p, k := strings.Split(pattern, "."), strings.Split(key, ".")
	if len(p) != len(k) {
		return false
	}
	for i := range p {
		if p[i] != "*" && p[i] != k[i] {
			return false
		}
	}
	return true
}
