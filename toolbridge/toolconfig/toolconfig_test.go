package toolconfig

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	ok := Server{Name: "search", URL: "https://mcp.example.com/mcp"}
	tests := []struct {
		name string
		s    Server
		want string // "" = valid
	}{
		{"an HTTP server", ok, ""},
		{"a stdio server", Server{Name: "local", Command: []string{"/usr/bin/srv", "--x"}, Env: map[string]Secret{"TOKEN": {Env: "T"}}}, ""},
		{"neither url nor command", Server{Name: "a"}, "exactly one of url"},
		{"both url and command", Server{Name: "a", URL: ok.URL, Command: []string{"/bin/x"}}, "exactly one of url"},
		{"a relative program", Server{Name: "a", Command: []string{"srv"}}, "absolute path"},
		{"headers on a stdio server", Server{Name: "a", Command: []string{"/bin/x"}, Headers: map[string]Secret{"A": {Env: "B"}}}, "takes env, not headers"},
		{"env on an HTTP server", Server{Name: "a", URL: ok.URL, Env: map[string]Secret{"A": {Env: "B"}}}, "only a command server"},
		{"credentials in the URL", Server{Name: "a", URL: "https://u:p@h/mcp"}, "must not carry credentials"},
		{"a secret with both sources", Server{Name: "a", URL: ok.URL, Headers: map[string]Secret{"A": {Env: "B", File: "/f"}}}, "exactly one of file or env"},
		{"a dotted name", Server{Name: "a.b", URL: ok.URL}, "no dots"},
		{"a bad glob", Server{Name: "a", URL: ok.URL, Allow: []string{"["}}, "bad glob"},
		{"a result cap over the bridge's", Server{Name: "a", URL: ok.URL, MaxResultBytes: MaxResultBytesCap + 1}, "max_result_bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Config{Servers: []Server{tc.s}}.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("want valid, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
	if err := (Config{Servers: []Server{ok, ok}}).Validate(); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Errorf("duplicate names: %v", err)
	}
}

func TestValidateAPI(t *testing.T) {
	ok := Server{Name: "crm", URL: "https://crm.example/mcp", Headers: map[string]Secret{"Authorization": {File: "/run/secrets/crm"}}}
	if err := ok.ValidateAPI(); err != nil {
		t.Fatalf("a good server: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Server)
		want string // the message starts with the field
	}{
		{"a command", func(s *Server) { s.URL, s.Command = "", []string{"/bin/sh"} }, "command:"},
		{"env", func(s *Server) { s.Env = map[string]Secret{"A": {Env: "B"}} }, "env:"},
		{"no url", func(s *Server) { s.URL = "" }, "url:"},
		{"a long url", func(s *Server) { s.URL = "https://x/" + strings.Repeat("a", MaxURLBytes) }, "url:"},
		{"a relative secret file", func(s *Server) { s.Headers["Authorization"] = Secret{File: "secrets/../x"} }, "headers.Authorization.file:"},
		{"both sources", func(s *Server) { s.Headers["Authorization"] = Secret{File: "/x", Env: "Y"} }, "headers.Authorization:"},
		{"too many globs", func(s *Server) { s.Allow = make([]string, MaxAllowGlobs+1) }, "allow"},
		{"a long timeout", func(s *Server) { s.TimeoutMS = MaxTimeoutMS + 1 }, "timeout_ms:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			s.Headers = map[string]Secret{"Authorization": ok.Headers["Authorization"]}
			tc.mod(&s)
			err := s.ValidateAPI()
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("want an error starting %q, got %v", tc.want, err)
			}
		})
	}
}

func TestAPIScope(t *testing.T) {
	sc := APIScope{}.WithDefaults()
	in := Server{Headers: map[string]Secret{"A": {File: "/run/secrets/crm"}, "B": {Env: "TOOL_SECRET_CRM"}}}
	if err := sc.Check(in); err != nil {
		t.Fatalf("inside the default scope: %v", err)
	}
	for _, sec := range []Secret{{File: "/run/secrets"}, {File: "/run/secretsx/a"}, {File: "/etc/execgate/key"}, {Env: "TOOL_SECRET_"}, {Env: "EXECGATE_QUOTA_REDIS_URL"}} {
		if err := sc.Check(Server{Headers: map[string]Secret{"A": sec}}); err == nil || !strings.HasPrefix(err.Error(), "headers.A.") {
			t.Errorf("%+v: %v", sec, err)
		}
	}
	if err := (APIScope{SecretDirs: []string{"/"}, EnvPrefixes: []string{""}}).Validate(); err == nil || !strings.Contains(err.Error(), "secret_dirs[0]") || !strings.Contains(err.Error(), "env_prefixes[0]") {
		t.Errorf("a bad scope: %v", err)
	}
}
