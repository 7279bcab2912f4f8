package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestServeTracesFlagSetsTheTelemetryKeys(t *testing.T) {
	t.Setenv("EXECGATE_STATE_DIR", t.TempDir())
	for _, tc := range []struct {
		flag            string
		tracing, stdout bool
		err             string
	}{
		{"stdout", false, true, ""},
		{"otlp", true, false, ""},
		{"stdout,otlp", true, true, ""},
		{"none", false, false, ""},
		{"jaeger", false, false, `--traces: "jaeger" is not otlp, stdout or none`},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			kv, err := tracesOverrides(tc.flag)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			flags = globalFlags{}
			cfg, err := loadConfig(kv...)
			if err != nil {
				t.Fatal(err)
			}
			tel := cfg.Telemetry
			if tel.Tracing == nil || *tel.Tracing != tc.tracing || tel.TracesStdout != tc.stdout {
				t.Fatalf("--traces %s: tracing %v, stdout %v", tc.flag, tel.Tracing, tel.TracesStdout)
			}
			if _, set := os.LookupEnv("EXECGATE_TELEMETRY_TRACING"); set {
				t.Errorf("--traces set EXECGATE_TELEMETRY_TRACING in the process's environment")
			}
		})
	}
}

// The global flags reach the config without being set in the process's
// environment: a later command of the same process (a test, or the next
// Execute) must not inherit the state dir of an earlier one.
func TestGlobalFlagsDoNotLeakIntoTheEnvironment(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	t.Setenv("EXECGATE_STATE_DIR", "")
	os.Unsetenv("EXECGATE_STATE_DIR")
	flags = globalFlags{stateDir: state, listen: "127.0.0.1:0"}
	t.Cleanup(func() { flags = globalFlags{} })
	cfg, err := loadConfig("EXECGATE_SERVER_MAX_CONCURRENT_RUNS=3")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.StateDir != state || cfg.Listen != "127.0.0.1:0" || cfg.Server.MaxConcurrentRuns != 3 {
		t.Errorf("state dir %q, listen %q, max concurrent runs %d: the flags did not reach the config", cfg.StateDir, cfg.Listen, cfg.Server.MaxConcurrentRuns)
	}
	for _, k := range []string{"EXECGATE_STATE_DIR", "EXECGATE_LISTEN", "EXECGATE_SERVER_MAX_CONCURRENT_RUNS"} {
		if v, set := os.LookupEnv(k); set {
			t.Errorf("%s=%q was left in the process's environment", k, v)
		}
	}
}
