package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/execgate/execgate/gateway"
)

// toolsFlags are the flags of `execgate admin tools …`.
type toolsFlags struct {
	adminFlags
	server         string
	serverURL      string
	headers        []string // Name=file:/path or Name=env:VAR
	allow          []string
	timeoutMS      int64
	maxResultBytes int64
	toolsTTLMS     int64
}

// newAdminToolsCmd is `execgate admin tools get|set|rm`.
func newAdminToolsCmd() *cobra.Command {
	var f toolsFlags
	tc := &cobra.Command{
		Use:   "tools",
		Short: "Show a tenant's MCP tool servers, or add, replace or remove one over the API",
		Long: `Show a tenant's effective MCP tool servers (GET /v1/admin/tenants/{id}/tools:
admin, or tenant-admin/auditor of the tenant), or add, replace or remove a
server (PUT|DELETE /v1/admin/tenants/{id}/tools/servers/{name}: admin only).
Header values are never sent: --header names where the gateway reads each one,
a file or an environment variable of the gateway.

  export EXECGATE_TOKEN=$(execgate token --tenant acme --role admin)
  execgate admin tools set --tenant acme --server crm --url https://crm.internal/mcp \
    --header 'Authorization=file:/run/secrets/crm-token' --allow 'lookup' --allow 'list_*'
  execgate admin tools rm --tenant acme --server crm`,
	}
	pf := tc.PersistentFlags()
	pf.StringVar(&f.url, "url", "", "gateway base URL (default: http:// and the listen address of --config/--listen/EXECGATE_LISTEN, or of the embedded default)")
	pf.StringVar(&f.token, "token", "", "bearer token: admin, or tenant-admin/auditor for get of its own tenant (default $EXECGATE_TOKEN)")
	pf.StringVar(&f.tenant, "tenant", "", "tenant id (required)")

	get := &cobra.Command{
		Use:   "get",
		Short: "Print the tenant's effective tool servers, each with its source (config or api)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			data, err := c.do(cmd.Context(), http.MethodGet, c.path("tools"), nil)
			if err != nil {
				return fmt.Errorf("getting tool servers: %w", err)
			}
			return printTools(cmd, data)
		},
	}

	set := newToolsSetCmd(&f)

	rm := &cobra.Command{
		Use:   "rm",
		Short: "Remove a tool server added over the API (a config-file server it replaced applies again)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.server == "" {
				return errors.New("rm: --server is required")
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			data, err := c.do(cmd.Context(), http.MethodDelete, c.path("tools/servers/"+url.PathEscape(f.server)), nil)
			if err != nil {
				return fmt.Errorf("removing tool server %s: %w", f.server, err)
			}
			return printTools(cmd, data)
		},
	}
	for _, c := range []*cobra.Command{set, rm} {
		c.Flags().StringVar(&f.server, "server", "", "the server's name (its tools are <name>.<tool>; required)")
	}
	tc.AddCommand(get, set, rm)
	return tc
}

// newToolsSetCmd is `execgate admin tools set`: add or replace a server.
func newToolsSetCmd(f *toolsFlags) *cobra.Command {
	set := &cobra.Command{
		Use:     "set",
		Short:   "Add or replace a tool server (a config-file server of the same name is replaced until rm)",
		Example: "  execgate admin tools set --tenant acme --server crm --url https://crm.internal/mcp --header 'Authorization=env:CRM_TOKEN' --allow 'a*'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			body, err := f.serverBody()
			if err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			data, err := c.do(cmd.Context(), http.MethodPut, c.path("tools/servers/"+url.PathEscape(f.server)), body)
			if err != nil {
				return fmt.Errorf("setting tool server %s: %w", f.server, err)
			}
			return printTools(cmd, data)
		},
	}
	sf := set.Flags()
	sf.StringVar(&f.serverURL, "mcp-url", "", "the server's MCP streamable HTTP endpoint (required)")
	sf.StringArrayVar(&f.headers, "header", nil, "Name=file:/path or Name=env:VARIABLE of the gateway (repeatable; never a literal value)")
	sf.StringArrayVar(&f.allow, "allow", nil, "glob over the server's tool names that may be offered (repeatable; default *)")
	sf.Int64Var(&f.timeoutMS, "timeout-ms", 0, "one call's bound, ms (default 10000)")
	sf.Int64Var(&f.maxResultBytes, "max-result-bytes", 0, "one result's bound, bytes (default 1 MiB)")
	sf.Int64Var(&f.toolsTTLMS, "tools-ttl-ms", 0, "how long the tool list is cached, ms (default 60000)")
	return set
}

// serverBody is the tool server object set sends (PUT
// /v1/admin/tenants/{id}/tools/servers/{name}), from the flags given.
func (f *toolsFlags) serverBody() (map[string]any, error) {
	if f.server == "" || f.serverURL == "" {
		return nil, errors.New("set: --server and --mcp-url are required")
	}
	body := map[string]any{"url": f.serverURL}
	if len(f.headers) > 0 {
		hs, err := parseHeaderRefs(f.headers)
		if err != nil {
			return nil, err
		}
		body["headers"] = hs
	}
	if len(f.allow) > 0 {
		body["allow"] = f.allow
	}
	for name, v := range map[string]int64{"timeout_ms": f.timeoutMS, "max_result_bytes": f.maxResultBytes, "tools_ttl_ms": f.toolsTTLMS} {
		if v != 0 {
			body[name] = v
		}
	}
	return body, nil
}

// parseHeaderRefs turns Name=file:/path and Name=env:VAR into the API's
// header objects.
func parseHeaderRefs(in []string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, h := range in {
		name, ref, ok := strings.Cut(h, "=")
		kind, where, ok2 := strings.Cut(ref, ":")
		if !ok || !ok2 || name == "" || where == "" || (kind != "file" && kind != "env") {
			// Never echo the argument: it may be a pasted secret.
			return nil, fmt.Errorf("--header %q…: want Name=file:/path or Name=env:VARIABLE (the gateway reads the value; literal values are refused)", clipName(name))
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--header %s given twice", name)
		}
		out[name] = map[string]string{kind: where}
	}
	return out, nil
}

func clipName(s string) string {
	if len(s) > 32 {
		return s[:32]
	}
	return s
}

// printTools checks the answer is a tenant tools response and prints it.
func printTools(cmd *cobra.Command, data []byte) error {
	var resp gateway.TenantToolsResponse
	if err := decodeAnswer(data, &resp); err != nil {
		return fmt.Errorf("decoding answer: %w", err)
	}
	return printIndented(cmd.OutOrStdout(), data)
}
