package policy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/download"
	"github.com/open-policy-agent/opa/v1/logging"
	"github.com/open-policy-agent/opa/v1/plugins"
	"github.com/open-policy-agent/opa/v1/plugins/rest"

	"github.com/execgate/execgate/internal/pemkey"
)

// DefaultBundlePoll is the bundle polling interval when poll_seconds is 0.
const DefaultBundlePoll = 30 * time.Second

// bundleSizeLimit caps a downloaded bundle (any one file in it).
const bundleSizeLimit = 32 << 20

// Validate checks the policy config: directories exist, the bundle URL is
// http(s) and its verification key parses.
func (c Config) Validate() error {
	var errs []error
	for i, d := range c.Dirs {
		if info, err := os.Stat(d); err != nil {
			errs = append(errs, fmt.Errorf("policy.dirs[%d]: %w", i, err))
		} else if !info.IsDir() {
			errs = append(errs, fmt.Errorf("policy.dirs[%d]: %s is not a directory", i, d))
		}
	}
	if c.DecisionCache != nil && *c.DecisionCache < 0 {
		errs = append(errs, fmt.Errorf("policy.decision_cache: %d is negative (0 turns the memo off)", *c.DecisionCache))
	}
	if c.Bundle != nil {
		if err := c.Bundle.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (b BundleConfig) validate() error {
	u, err := url.Parse(b.URL)
	if err != nil {
		return fmt.Errorf("policy.bundle.url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("policy.bundle.url: %q is not an http(s) URL", b.URL)
	}
	if b.PollSeconds < 0 {
		return fmt.Errorf("policy.bundle.poll_seconds: %d is negative", b.PollSeconds)
	}
	if b.VerificationKey != "" {
		if _, _, err := b.verificationKey(); err != nil {
			return err
		}
	}
	return nil
}

// poll is the polling interval.
func (b BundleConfig) poll() time.Duration {
	if b.PollSeconds <= 0 {
		return DefaultBundlePoll
	}
	return time.Duration(b.PollSeconds) * time.Second
}

// verificationKey reads the PEM public key and picks its JWS algorithm:
// RS256 for RSA, ES256/384/512 for P-256/384/521.
func (b BundleConfig) verificationKey() (pemText, alg string, err error) {
	raw, err := os.ReadFile(b.VerificationKey)
	if err != nil {
		return "", "", fmt.Errorf("policy.bundle.verification_key: %w", err)
	}
	pub, err := pemkey.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("policy.bundle.verification_key %s: %w", b.VerificationKey, err)
	}
	switch k := pub.(type) {
	case *rsa.PublicKey:
		alg = "RS256"
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			alg = "ES256"
		case elliptic.P384():
			alg = "ES384"
		case elliptic.P521():
			alg = "ES512"
		}
	}
	if alg == "" {
		return "", "", fmt.Errorf("policy.bundle.verification_key: %T keys are not supported (use RSA or ECDSA)", pub)
	}
	return string(raw), alg, nil
}

// bundleLoader downloads one bundle with OPA's downloader: ETag caching
// (If-None-Match, 304) and signature verification (.signatures.json against
// the configured key). A bundle that fails to download or verify is refused
// and the last good one stays current.
type bundleLoader struct {
	cfg BundleConfig
	dl  *download.Downloader

	// fetchMu serialises downloads: the downloader is not safe for
	// concurrent use.
	fetchMu sync.Mutex

	// mu guards latest and gen.
	mu     sync.Mutex
	latest *bundle.Bundle
	gen    int
}

func newBundleLoader(cfg BundleConfig) (*bundleLoader, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	u, _ := url.Parse(cfg.URL)
	path := u.EscapedPath()
	if u.RawQuery != "" {
		path += "?" + u.RawQuery
	}
	restCfg, err := json.Marshal(map[string]any{"name": "execgate-policy-bundle", "url": u.Scheme + "://" + u.Host})
	if err != nil {
		return nil, err
	}
	client, err := rest.New(restCfg, nil, rest.Logger(logging.NewNoOpLogger()))
	if err != nil {
		return nil, fmt.Errorf("policy bundle client: %w", err)
	}
	trigger := plugins.TriggerManual
	poll := int64(cfg.poll() / time.Second)
	dcfg := download.Config{Trigger: &trigger, Polling: download.PollingConfig{MinDelaySeconds: &poll, MaxDelaySeconds: &poll}}
	if err := dcfg.ValidateAndInjectDefaults(); err != nil {
		return nil, fmt.Errorf("policy bundle downloader: %w", err)
	}
	l := &bundleLoader{cfg: cfg}
	l.dl = download.New(dcfg, client, path).
		WithBundleParserOpts(ast.ParserOptions{RegoVersion: ast.RegoV1}).
		WithSizeLimitBytes(bundleSizeLimit).
		WithCallback(l.update)
	if cfg.VerificationKey != "" {
		key, alg, err := cfg.verificationKey()
		if err != nil {
			return nil, err
		}
		id := cfg.KeyID
		if id == "" {
			id = "default"
		}
		keys := map[string]*bundle.KeyConfig{id: {Key: key, Algorithm: alg}}
		l.dl = l.dl.WithBundleVerificationConfig(bundle.NewVerificationConfig(keys, id, "", nil))
	}
	return l, nil
}

// update is the downloader's callback; a nil Bundle without error is a 304.
func (l *bundleLoader) update(_ context.Context, u download.Update) error {
	if u.Error != nil || u.Bundle == nil {
		return nil
	}
	if u.Bundle.Type() == bundle.DeltaBundleType {
		return errors.New("delta bundles are not supported (they cannot be signed)")
	}
	l.mu.Lock()
	l.latest = u.Bundle
	l.gen++
	l.mu.Unlock()
	return nil
}

// fetch downloads the bundle unless the server answers 304 for the current
// ETag. changed reports a new verified bundle.
func (l *bundleLoader) fetch(ctx context.Context) (changed bool, err error) {
	l.fetchMu.Lock()
	defer l.fetchMu.Unlock()
	l.mu.Lock()
	before := l.gen
	l.mu.Unlock()
	if err := l.dl.Trigger(ctx); err != nil {
		return false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.latest == nil {
		return false, errors.New("the server sent no bundle")
	}
	return l.gen != before, nil
}

// current is the latest verified bundle (nil before the first).
func (l *bundleLoader) current() *bundle.Bundle {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.latest
}

// bundleSources parses a bundle's modules, named bundle:<path>.
func bundleSources(b *bundle.Bundle) ([]source, error) {
	out := make([]source, 0, len(b.Modules))
	for _, m := range b.Modules {
		if isTestModule(m.Path) {
			continue
		}
		src, err := parseModule("bundle:"+m.Path, m.Raw)
		if err != nil {
			return nil, err
		}
		out = append(out, src)
	}
	return out, nil
}
