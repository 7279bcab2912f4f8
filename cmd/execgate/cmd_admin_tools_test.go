package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/tenancy"
)

func runAdminTools(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newAdminCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(append([]string{"tools"}, args...))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestAdminToolsAgainstTheGateway(t *testing.T) {
	dir := t.TempDir()
	a, signer := startGateway(t, func(c *config.Config) { c.ToolsAPI.SecretDirs = []string{dir} })
	secret := filepath.Join(dir, "crm-token")
	const token = "cli-secret-value-0123456789"
	if err := os.WriteFile(secret, []byte("Bearer "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	admin := mint(t, signer, "acme", tenancy.RoleAdmin)
	common := []string{"--url", a.URL(), "--token", admin, "--tenant", "acme"}

	out, err := runAdminTools(t, append([]string{"set", "--server", "crm", "--mcp-url", "http://127.0.0.1:9/mcp",
		"--header", "Authorization=file:" + secret, "--allow", "look*", "--timeout-ms", "5000"}, common...)...)
	if err != nil {
		t.Fatalf("set: %v", err)
	}
	for _, want := range []string{`"name": "crm"`, `"source": "api"`, `"Authorization"`, `"look*"`, `"timeout_ms": 5000`} {
		if !strings.Contains(out, want) {
			t.Errorf("set printed no %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, token) || strings.Contains(out, secret) {
		t.Errorf("set printed the secret or its file:\n%s", out)
	}
	if out, err = runAdminTools(t, append([]string{"get"}, common...)...); err != nil || !strings.Contains(out, `"source": "api"`) {
		t.Errorf("get: %v\n%s", err, out)
	}
	// A literal value is refused before anything is sent, without echoing it.
	_, err = runAdminTools(t, append([]string{"set", "--server", "crm", "--mcp-url", "http://127.0.0.1:9/mcp", "--header", "Authorization=Bearer " + token}, common...)...)
	if err == nil || strings.Contains(err.Error(), token) || !strings.Contains(err.Error(), "file:") {
		t.Errorf("a literal header: %v", err)
	}
	// The gateway's refusal of a command-less but bad request comes back.
	_, err = runAdminTools(t, append([]string{"set", "--server", "crm", "--mcp-url", "ftp://x"}, common...)...)
	if err == nil || !strings.Contains(err.Error(), "400 BadRequest: url:") {
		t.Errorf("a bad url: %v", err)
	}
	// Only admin changes servers.
	tadmin := mint(t, signer, "acme", tenancy.RoleTenantAdmin)
	_, err = runAdminTools(t, "rm", "--server", "crm", "--url", a.URL(), "--token", tadmin, "--tenant", "acme")
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("rm as tenant-admin: %v", err)
	}
	if out, err = runAdminTools(t, append([]string{"rm", "--server", "crm"}, common...)...); err != nil || strings.Contains(out, `"crm"`) {
		t.Errorf("rm: %v\n%s", err, out)
	}
	if _, err = runAdminTools(t, append([]string{"rm", "--server", "crm"}, common...)...); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a second rm: %v", err)
	}
}
