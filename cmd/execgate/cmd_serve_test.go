package main

import (
	"os"
	"strings"
	"testing"
)

func TestServeTracesFlagSetsTheTelemetryKeys(t *testing.T) {
	for _, tc := range []struct {
		flag, tracing, stdout, err string
	}{
		{"stdout", "false", "true", ""},
		{"otlp", "true", "false", ""},
		{"stdout,otlp", "true", "true", ""},
		{"none", "false", "false", ""},
		{"jaeger", "", "", `--traces: "jaeger" is not otlp, stdout or none`},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			t.Setenv("EXECGATE_TELEMETRY_TRACING", "")
			t.Setenv("EXECGATE_TELEMETRY_TRACES_STDOUT", "")
			err := setTraces(tc.flag)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || os.Getenv("EXECGATE_TELEMETRY_TRACING") != tc.tracing || os.Getenv("EXECGATE_TELEMETRY_TRACES_STDOUT") != tc.stdout {
				t.Fatalf("err %v, tracing %q, stdout %q", err, os.Getenv("EXECGATE_TELEMETRY_TRACING"), os.Getenv("EXECGATE_TELEMETRY_TRACES_STDOUT"))
			}
		})
	}
}
