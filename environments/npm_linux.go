package environments

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/execgate/execgate/environments/npm"
	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/sandbox"
)

// npmSource is the registry npm environments come from
// (sandbox.npm_registry).
type npmSource struct {
	url       string
	tokenFile string
	client    *http.Client
	platform  npm.Platform
}

func newNPMSource(c sandbox.NPMRegistry) npmSource {
	u := c.URL
	if u == "" {
		u = sandbox.DefaultNPMRegistry
	}
	// Proxies from the gateway's environment (HTTPS_PROXY, NO_PROXY) and
	// the system's CA store (SSL_CERT_FILE), as for uv; no redirect may
	// leave the registry with its token (Go drops Authorization on a
	// redirect to another host).
	return npmSource{url: u, tokenFile: c.TokenFile, client: &http.Client{Transport: http.DefaultTransport}, platform: npm.HostPlatform()}
}

// index is the registry without credentials, as locks and the policy name
// it.
func (s npmSource) index() string { return redactURL(s.url) }

// registry is the registry client, with the token read now (a rotated one
// needs no restart).
func (s npmSource) registry() (*npm.Registry, error) {
	r := &npm.Registry{URL: s.url, Client: s.client}
	if s.tokenFile != "" {
		b, err := os.ReadFile(s.tokenFile)
		if err != nil {
			return nil, &sandbox.UnavailableError{Reason: "sandbox.npm_registry.token_file", Err: err}
		}
		r.Token = strings.TrimSpace(string(b))
	}
	return r, nil
}

// ResolveNPM resolves npm requirements (exact versions, "left-pad@1.3.0";
// npm.ParseRequirements) to their complete locked set, every package with
// its sha512 integrity, from sandbox.npm_registry. A set that cannot be
// resolved (no such package or version, a git or URL dependency, the
// registry unreachable) is a DependencyError; bad strings are a plain
// error (the caller names the field).
func (e *Cache) ResolveNPM(ctx context.Context, reqs []string) (Environment, *sandbox.ErrorInfo, error) {
	rs, err := npm.ParseRequirements(reqs)
	if err != nil {
		return Environment{}, nil, err
	}
	key := npmResolveKey(e.npm.index(), e.npm.platform, rs)
	return e.cachedResolve(ctx, key, func(ctx context.Context) (Environment, *sandbox.ErrorInfo, error) {
		what := make([]string, len(rs))
		for i, r := range rs {
			what[i] = r.String()
		}
		doing := "resolving " + strings.Join(what, " ")
		reg, err := e.npm.registry()
		if err != nil {
			return Environment{}, nil, err
		}
		ctx, cancel := context.WithTimeout(ctx, e.d.timeout)
		defer cancel()
		pkgs, err := npm.Resolve(ctx, reg, e.npm.platform, rs)
		if err != nil {
			return Environment{}, npmFailure(ctx, doing, e.d.timeout.String(), err), nil
		}
		env, err := npmEnvironment(pkgs, e.npm.index())
		if err != nil {
			return Environment{}, nil, err
		}
		return env, nil, nil
	})
}

// npmFill installs an npm environment (npm.Install): tarballs from the
// registry (or the deps dir's tarball cache), checked against the lock.
func (e *Cache) npmFill(env Environment) fill {
	return func(ctx context.Context, tmp, what string) (*sandbox.ErrorInfo, error) {
		reg, err := e.npm.registry()
		if err != nil {
			return nil, err
		}
		base, err := baseImportMap()
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(ctx, e.d.timeout)
		defer cancel()
		err = npm.Install(ctx, reg, env.npm, tmp, npm.InstallOptions{
			BaseImportMap: base,
			DenoDir:       jaillayout.DepsDenoDir,
			TarballCache:  e.d.npmCacheDir(),
			Limits:        npm.Limits{MaxBytes: e.d.maxBytes},
		})
		if err != nil {
			return npmFailure(ctx, "installing "+what, e.d.timeout.String(), err), nil
		}
		return nil, nil
	}
}

// npmFailure is the DependencyError of a resolve or install that failed.
func npmFailure(ctx context.Context, doing, timeout string, err error) *sandbox.ErrorInfo {
	msg := fmt.Sprintf("%s: %v", doing, err)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		msg = fmt.Sprintf("%s timed out after %s (sandbox.deps_timeout_ms)", doing, timeout)
	}
	return &sandbox.ErrorInfo{Type: sandbox.ErrDependencyError, Message: clip(msg, maxErrorText)}
}
