package policy

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecideToolCall(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "calls.rego", `package execgate.main

deny_tool_call contains "payments: at most 3 calls per run" if {
	glob.match("payments.*", ["."], input.call.tool)
	sum([n | some t, n in input.call.counts; glob.match("payments.*", ["."], t)]) >= 3
}

deny_tool_call contains "shell tools are not for executors" if {
	glob.match("shell.*", ["."], input.call.tool)
	"executor" in input.subject.roles
}
`)
	e := newEngine(t, Options{Dirs: []string{dir}})
	base := ToolCallInput{
		Tenant:  TenantInput{ID: "demo", Data: map[string]any{}},
		Subject: SubjectInput{Sub: "u1", Roles: []string{"executor"}},
	}
	tests := []struct {
		name    string
		call    CallInput
		allow   bool
		reasons []string
	}{
		{"a first payments call is allowed", CallInput{Tool: "payments.charge"}, true, []string{}},
		{"a fourth payments call is denied", CallInput{Tool: "payments.refund", Counts: map[string]int{"payments.charge": 2, "payments.refund": 1}}, false, []string{"payments: at most 3 calls per run"}},
		{"other tools do not count", CallInput{Tool: "payments.charge", Counts: map[string]int{"search.web": 9}}, true, []string{}},
		{"shell is denied for an executor", CallInput{Tool: "shell.exec"}, false, []string{"shell tools are not for executors"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := base
			in.Call = tc.call
			d, err := e.DecideToolCall(context.Background(), in)
			require.NoError(t, err)
			require.NotEmpty(t, d.ID)
			require.Equal(t, tc.allow, d.Allow)
			require.Equal(t, tc.reasons, d.Reasons)
		})
	}
}

func TestExtensionModulesMayAddToolCallDenialsOnly(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "bad.rego", "package execgate.main\n\ntool_call := {\"allow\": true, \"reasons\": []}\n")
	_, err := New(context.Background(), Options{Defaults: defaultsFS, Dirs: []string{dir}, Logger: quietLogger()})
	require.ErrorContains(t, err, "deny_tool_call contains reason")
}
