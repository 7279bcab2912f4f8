package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/execgate/execgate/gateway"
	"github.com/execgate/execgate/quota"
)

// adminFlags are the flags of `execgate admin quota …`.
type adminFlags struct {
	url    string
	token  string
	tenant string
	limits quota.Limits
}

const (
	adminTimeout = 30 * time.Second
	// maxAdminBody caps what we read from the gateway.
	maxAdminBody = 1 << 20
)

// quotaFlags are set's flags, in the quota object's order.
var quotaFlags = []string{"rate-per-minute", "burst", "concurrency", "daily-cpu-seconds", "max-queued"}

func newAdminCmd() *cobra.Command {
	admin := &cobra.Command{
		Use:   "admin",
		Short: "Administer a running gateway over its admin API (roles admin, tenant-admin, auditor)",
	}
	admin.AddCommand(newAdminQuotaCmd(), newAdminToolsCmd())
	return admin
}

// newAdminQuotaCmd is `execgate admin quota`: get, set, clear and usage,
// sharing the --url, --token and --tenant flags.
func newAdminQuotaCmd() *cobra.Command {
	q := &cobra.Command{
		Use:   "quota",
		Short: "Show, override or clear a tenant's quota, or show its usage",
		Long: `Show, override or clear a tenant's quota, or show its usage, through the
gateway's admin API (GET|PUT|DELETE /v1/admin/tenants/{id}/quota,
GET /v1/admin/tenants/{id}/usage). get and usage take a token with the
admin role (any tenant) or tenant-admin or auditor (its own tenant only);
set and clear need admin:

  export EXECGATE_TOKEN=$(execgate token --tenant acme --role admin)
  execgate admin quota set --tenant acme --concurrency 8`,
	}
	f := &adminFlags{}
	pf := q.PersistentFlags()
	pf.StringVar(&f.url, "url", "", "gateway base URL (default: http:// and the listen address of --config/--listen/EXECGATE_LISTEN, or of the embedded default)")
	pf.StringVar(&f.token, "token", "", "bearer token: admin, or tenant-admin/auditor for get and usage of its own tenant (default $EXECGATE_TOKEN)")
	pf.StringVar(&f.tenant, "tenant", "", "tenant id (required)")

	q.AddCommand(newQuotaGetCmd(f), newQuotaSetCmd(f), newQuotaClearCmd(f), newQuotaUsageCmd(f))
	return q
}

// newQuotaGetCmd prints the tenant's quota.
func newQuotaGetCmd(f *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "get",
		Short: "Print the tenant's configured quota, admin override and effective quota",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			data, _, err := c.quota(cmd.Context(), http.MethodGet, nil)
			if err != nil {
				return fmt.Errorf("getting quota: %w", err)
			}
			return printIndented(cmd.OutOrStdout(), data)
		},
	}
}

// newQuotaSetCmd overrides the tenant's quota; flags not given keep their
// effective value.
func newQuotaSetCmd(f *adminFlags) *cobra.Command {
	set := &cobra.Command{
		Use:   "set",
		Short: "Override the tenant's quota (flags not given keep their effective value)",
		Long: `Override the tenant's quota. The override is validated, stored in the quota
backend and applies from the tenant's next request on every replica. Flags not
given keep the tenant's current effective value; 0 means unlimited.`,
		Example: "  execgate admin quota set --tenant acme --concurrency 8 --daily-cpu-seconds 7200",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			changed := map[string]bool{}
			for _, n := range quotaFlags {
				if cmd.Flags().Changed(n) {
					changed[n] = true
				}
			}
			if len(changed) == 0 {
				return fmt.Errorf("set: give at least one of --%s", strings.Join(quotaFlags, ", --"))
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			l, err := c.merge(cmd.Context(), f.limits, changed)
			if err != nil {
				return err
			}
			if err := l.Validate(); err != nil {
				return fmt.Errorf("set: %w", err)
			}
			data, _, err := c.quota(cmd.Context(), http.MethodPut, l)
			if err != nil {
				return fmt.Errorf("setting quota: %w", err)
			}
			return printIndented(cmd.OutOrStdout(), data)
		},
	}
	sf := set.Flags()
	sf.IntVar(&f.limits.RatePerMinute, "rate-per-minute", 0, "requests per minute (0: unlimited)")
	sf.IntVar(&f.limits.Burst, "burst", 0, "requests admitted at once (>= 1 with a rate)")
	sf.IntVar(&f.limits.Concurrency, "concurrency", 0, "runs in flight at once (0: unlimited)")
	sf.Int64Var(&f.limits.DailyCPUSeconds, "daily-cpu-seconds", 0, "CPU seconds per UTC day (0: unlimited)")
	sf.IntVar(&f.limits.MaxQueued, "max-queued", 0, "runs waiting for an executor, server.role gateway (0: unbounded)")
	return set
}

// newQuotaClearCmd removes the tenant's override.
func newQuotaClearCmd(f *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "clear",
		Short: "Remove the tenant's override: the configured quota applies again",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			data, _, err := c.quota(cmd.Context(), http.MethodDelete, nil)
			if err != nil {
				return fmt.Errorf("clearing quota: %w", err)
			}
			return printIndented(cmd.OutOrStdout(), data)
		},
	}
}

// newQuotaUsageCmd prints the tenant's usage.
func newQuotaUsageCmd(f *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "usage",
		Short: "Print the tenant's usage: rate remaining, runs in flight, CPU budget used and reserved",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			data, err := c.do(cmd.Context(), http.MethodGet, c.path("usage"), nil)
			if err != nil {
				return fmt.Errorf("getting usage: %w", err)
			}
			var u quota.Usage
			if err := decodeAnswer(data, &u); err != nil {
				return fmt.Errorf("getting usage: decoding answer: %w", err)
			}
			return printIndented(cmd.OutOrStdout(), data)
		},
	}
}

// adminClient talks to the gateway's admin API.
type adminClient struct {
	base   string // scheme://host[/prefix], no trailing slash
	token  string
	tenant string
	http   *http.Client
}

func (f *adminFlags) client() (*adminClient, error) {
	if f.tenant == "" {
		return nil, errors.New("--tenant is required")
	}
	token := f.token
	if token == "" {
		token = os.Getenv("EXECGATE_TOKEN")
	}
	if token == "" {
		return nil, fmt.Errorf("no token: pass --token or set EXECGATE_TOKEN (e.g. export EXECGATE_TOKEN=$(execgate token --tenant %s --role admin))", f.tenant)
	}
	base := f.url
	if base == "" {
		cfg, err := loadConfig()
		if err != nil {
			return nil, fmt.Errorf("finding the gateway's address in the config (or pass --url): %w", err)
		}
		base = listenURL(cfg.Listen)
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--url %q: want http(s)://host:port", base)
	}
	return &adminClient{
		base:   strings.TrimSuffix(u.String(), "/"),
		token:  token,
		tenant: f.tenant,
		http:   &http.Client{Timeout: adminTimeout},
	}, nil
}

// listenURL is the URL a client on this host uses to reach a gateway
// listening on addr: a wildcard host (":8010", "0.0.0.0:8010", "[::]:8010")
// is reached on loopback.
func listenURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// path is /v1/admin/tenants/{tenant}/{what}, the tenant escaped.
func (c *adminClient) path(what string) string {
	return "/v1/admin/tenants/" + url.PathEscape(c.tenant) + "/" + what
}

// quota calls the quota route and returns its answer and the effective
// limits in it. The gateway answers {tenant_id, configured, override,
// effective} (gateway.QuotaResponse); a bare quota object is accepted too.
func (c *adminClient) quota(ctx context.Context, method string, body any) ([]byte, quota.Limits, error) {
	data, err := c.do(ctx, method, c.path("quota"), body)
	if err != nil {
		return nil, quota.Limits{}, err
	}
	var resp gateway.QuotaResponse
	if err := decodeAnswer(data, &resp); err == nil {
		return data, resp.Effective, nil
	}
	var l quota.Limits
	if err := decodeAnswer(data, &l); err != nil {
		return nil, quota.Limits{}, fmt.Errorf("decoding answer: not a quota response: %w", err)
	}
	return data, l, nil
}

// merge fills the flags not given from the tenant's effective quota.
func (c *adminClient) merge(ctx context.Context, given quota.Limits, changed map[string]bool) (quota.Limits, error) {
	if len(changed) == len(quotaFlags) {
		return given, nil
	}
	_, cur, err := c.quota(ctx, http.MethodGet, nil)
	if err != nil {
		return quota.Limits{}, fmt.Errorf("reading the current quota to merge into: %w", err)
	}
	if changed["rate-per-minute"] {
		cur.RatePerMinute = given.RatePerMinute
	}
	if changed["burst"] {
		cur.Burst = given.Burst
	}
	if changed["concurrency"] {
		cur.Concurrency = given.Concurrency
	}
	if changed["daily-cpu-seconds"] {
		cur.DailyCPUSeconds = given.DailyCPUSeconds
	}
	if changed["max-queued"] {
		cur.MaxQueued = given.MaxQueued
	}
	return cur, nil
}

// apiError is a non-2xx answer from the gateway, from its error envelope.
type apiError struct {
	Status  int
	Type    string // error.type; empty when the body was not an envelope
	Message string
}

func (e *apiError) Error() string {
	if e.Type == "" {
		return fmt.Sprintf("gateway answered %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
	}
	return fmt.Sprintf("gateway answered %d %s: %s", e.Status, e.Type, e.Message)
}

// do sends body (if any) as JSON and returns a 2xx answer's body.
func (c *adminClient) do(ctx context.Context, method, path string, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encoding request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("calling %s %s: %w", method, req.URL.Redacted(), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminBody))
	if err != nil {
		return nil, fmt.Errorf("reading answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, decodeAPIError(resp.StatusCode, data)
	}
	return data, nil
}

// decodeAnswer decodes a 2xx body into out, tolerating fields added later
// but refusing a body that lacks one of out's top-level fields (a foreign
// answer would otherwise print as zeros).
func decodeAnswer(data []byte, out any) error {
	var got map[string]json.RawMessage
	if err := json.Unmarshal(data, &got); err != nil {
		return err
	}
	probe, err := json.Marshal(out)
	if err != nil {
		return err
	}
	var want map[string]json.RawMessage
	if err := json.Unmarshal(probe, &want); err != nil {
		return err
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			return fmt.Errorf("field %q missing", k)
		}
	}
	return json.Unmarshal(data, out)
}

// decodeAPIError reads the gateway's error envelope
// {"status":"error","error":{"type","message","reasons"?}}; anything else
// is shown as text (shortened).
func decodeAPIError(status int, data []byte) error {
	var env struct {
		Error struct {
			Type    string   `json:"type"`
			Message string   `json:"message"`
			Reasons []string `json:"reasons"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &env) == nil && env.Error.Type != "" {
		msg := env.Error.Message
		if len(env.Error.Reasons) > 0 {
			msg += " (" + strings.Join(env.Error.Reasons, "; ") + ")"
		}
		return &apiError{Status: status, Type: env.Error.Type, Message: msg}
	}
	text := strings.TrimSpace(string(data))
	if len(text) > 200 {
		text = text[:200] + "…"
	}
	return &apiError{Status: status, Message: text}
}

// printIndented prints a JSON answer indented, as the gateway sent it.
func printIndented(w io.Writer, data []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(data), "", "  "); err != nil {
		return fmt.Errorf("printing answer: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}
