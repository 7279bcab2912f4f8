package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/execgate/execgate/gateway"
)

// prepareTimeout bounds one POST /v1/prepare: resolving and installing can
// take as long as sandbox.deps_timeout_ms (twice: resolve, then install).
const prepareTimeout = 5 * time.Minute

func newPrepareCmd() *cobra.Command {
	var (
		reqs        []string
		lockFile    string
		token, base string
		lockOut     string
		language    string
		warm        int64
	)
	cmd := &cobra.Command{
		Use:   "prepare",
		Short: "Resolve, check and install a package environment on a running gateway",
		Long: `Asks a running gateway (POST /v1/prepare) to resolve --requirements (PEP 508,
wheels only; with --language javascript or typescript, npm packages with exact
versions, name@version) into a locked set, or to take --lock as is, check every package
with the token's tenant's package policy, and install the environment. It
prints {"environment_id", "lock", "packages", "cached", "warm", "limits",
"network_access", "ms"}; a run naming that environment_id (or the same
requirements, or the lock) installs nothing. --lock-out writes the lock to a
file for reproducible runs (requirements_lock).

--warm N (0-2) asks the gateway to also keep N jails started for the
environment, with the limits and network access the tenant's policy decides
(printed as "limits" and "network_access"): a run naming the environment with
no other limits takes one and starts without starting a jail. The jails live in
that gateway's warm pool (sandbox.warm_pool bounds N; none without a pool), so
they serve runs sent to that gateway process only.`,
		Example: `  export EXECGATE_TOKEN=$(execgate token --tenant demo)
  execgate prepare --requirements 'requests>=2.31,attrs' --lock-out requirements.lock
  execgate prepare --lock requirements.lock --warm 1
  execgate prepare --language javascript --requirements left-pad@1.3.0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			body := gateway.PrepareRequest{Language: language, Requirements: reqs, Warm: warm}
			switch {
			case len(reqs) > 0 && lockFile != "":
				return errors.New("--requirements and --lock: give one")
			case lockFile != "":
				b, err := os.ReadFile(lockFile)
				if err != nil {
					return fmt.Errorf("--lock: %w", err)
				}
				body.RequirementsLock = string(b)
			case len(reqs) == 0:
				return errors.New("give --requirements or --lock")
			}
			if token == "" {
				token = os.Getenv("EXECGATE_TOKEN")
			}
			if token == "" {
				return errors.New("no token: pass --token or set EXECGATE_TOKEN (e.g. export EXECGATE_TOKEN=$(execgate token --tenant demo))")
			}
			if base == "" {
				cfg, err := loadConfig()
				if err != nil {
					return fmt.Errorf("finding the gateway's address in the config (or pass --url): %w", err)
				}
				base = listenURL(cfg.Listen)
			}
			if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("--url %q: want http(s)://host:port", base)
			}
			b, err := json.Marshal(body)
			if err != nil {
				return err
			}
			req, err := http.NewRequestWithContext(cmd.Context(), http.MethodPost, strings.TrimSuffix(base, "/")+"/v1/prepare", bytes.NewReader(b))
			if err != nil {
				return err
			}
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := (&http.Client{Timeout: prepareTimeout}).Do(req)
			if err != nil {
				return fmt.Errorf("calling POST %s/v1/prepare: %w", base, err)
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
			if err != nil {
				return fmt.Errorf("reading answer: %w", err)
			}
			if resp.StatusCode != http.StatusOK {
				// The error body names the reasons (a denied package's chain,
				// uv's output): show it whole.
				_ = printIndented(cmd.ErrOrStderr(), data)
				return fmt.Errorf("gateway answered %d", resp.StatusCode)
			}
			var out gateway.PrepareResponse
			if err := json.Unmarshal(data, &out); err != nil || out.EnvironmentID == "" {
				return fmt.Errorf("decoding answer: not a prepare response: %s", clipText(data))
			}
			if lockOut != "" {
				if err := os.WriteFile(lockOut, []byte(out.Lock), 0o644); err != nil {
					return fmt.Errorf("--lock-out: %w", err)
				}
			}
			return printIndented(cmd.OutOrStdout(), data)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&reqs, "requirements", nil, "requirements to resolve (PEP 508, wheels only), e.g. 'requests>=2.31,attrs'; npm packages name@version with --language javascript")
	f.StringVar(&lockFile, "lock", "", "a lock to install as is (pip's hashes format, or an npm lock from a javascript prepare)")
	f.StringVar(&language, "language", "", "whose packages: python (default; PyPI), javascript or typescript (npm)")
	f.StringVar(&lockOut, "lock-out", "", "write the environment's lock to this file")
	f.Int64Var(&warm, "warm", 0, "jails the gateway keeps warm for the environment (0-2, at most sandbox.warm_pool)")
	f.StringVar(&token, "token", "", "bearer token with role executor (default $EXECGATE_TOKEN)")
	f.StringVar(&base, "url", "", "the gateway, http(s)://host:port (default: listen from the config)")
	return cmd
}

func clipText(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
