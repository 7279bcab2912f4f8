package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/execgate/execgate/app"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// diagProbeHost is a name only the diagnose check's resolver knows: the jail
// has no DNS of its own, so reaching it proves the name was resolved by the
// egress proxy, outside the jail.
const diagProbeHost = "diagnose.execgate.invalid"

// diagEgressTool fetches the probe URL through the proxy (HTTP_PROXY is set
// in proxy mode) and returns what it got.
const diagEgressTool = `import urllib.request

def run(args, context):
    with urllib.request.urlopen(args["url"], timeout=5) as r:
        return {"status": r.status, "body": r.read().decode()}
`

// diagEgress runs one jailed tool in network mode proxy against a listener on
// the host's loopback, reached by a name that only the proxy resolves. It
// checks the whole path: jail → in-jail relay → per-run socket → proxy →
// resolve → allow-list → dial. Nothing leaves the host.
func diagEgress(ctx context.Context, cfg *config.Config) diagCheck {
	c := diagCheck{Name: "DNS via egress proxy"}
	fail := func(detail, hint string) diagCheck {
		c.Status, c.Detail, c.Hint = diagFail, detail, hint
		return c
	}
	const body = "execgate-diagnose-ok"
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }), ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail("listening on loopback: "+err.Error(), "")
	}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	ecfg := cfg.Egress
	ecfg.AllowCIDRs = []string{"127.0.0.1/32"}
	ecfg.UpstreamProxy = ""
	scfg := cfg.Sandbox
	scfg.WarmPool = 0
	sb, err := app.NewSandbox(ctx, app.SandboxOptions{Sandbox: scfg, Egress: &ecfg, EgressResolver: diagResolver{}, Logger: diagLogger})
	if sb == nil {
		return fail(err.Error(), "check the egress section of the config")
	}
	defer sb.Close()
	if rootfsNotBuilt(err) {
		c.Status, c.Detail = diagNA, notBuiltYet
		return c
	}
	if err != nil {
		hint := "fix the sandbox checks above first"
		var ue *sandbox.UnavailableError
		if errors.As(err, &ue) && ue.Hint != "" {
			hint = ue.Hint
		}
		return fail(err.Error(), hint)
	}
	r := sb.Runtimes
	args, _ := json.Marshal(map[string]string{"url": fmt.Sprintf("http://%s:%d/", diagProbeHost, port)})
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := r.Run(ctx, sandbox.Spec{
		Source: diagEgressTool, Args: args, Network: sandbox.NetworkProxy,
		EgressAllow: []string{fmt.Sprintf("%s:%d", diagProbeHost, port)},
		Limits:      limits.Default,
	})
	if err != nil {
		hint := "see the error; execgate diagnose's other checks say whether any jail can start"
		var ue *sandbox.UnavailableError
		if errors.As(err, &ue) && ue.Hint != "" {
			hint = ue.Hint
		}
		return fail(err.Error(), hint)
	}
	if res.Status != sandbox.StatusOK {
		msg := string(res.Status)
		if res.Error != nil {
			msg = res.Error.Type + ": " + res.Error.Message
		}
		return fail("the jailed request through the proxy failed: "+msg, "see the sandbox and egress settings")
	}
	var got struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	}
	if err := json.Unmarshal(res.Result, &got); err != nil || got.Body != body {
		return fail(fmt.Sprintf("unexpected answer through the proxy: %s", res.Result), "")
	}
	var attempts []string
	for _, a := range res.Egress {
		attempts = append(attempts, fmt.Sprintf("%s:%d→%s allowed=%t", a.Host, a.Port, a.IP, a.Allowed))
	}
	c.Status = diagOK
	c.Detail = "a jailed tool reached a loopback listener by a name only the proxy resolves (" + strings.Join(attempts, ", ") + ")"
	return c
}

// diagResolver resolves only the probe name, to the host's loopback.
type diagResolver struct{}

func (diagResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == diagProbeHost {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, fmt.Errorf("diagnose resolver: %s is not the probe name", host)
}
