// Package webhook delivers the callbacks of async executions per the
// Standard Webhooks specification: a POST of a JSON payload with the
// headers webhook-id (the same for every attempt of one delivery),
// webhook-timestamp (Unix seconds of the attempt) and webhook-signature
// ("v1,<base64 HMAC-SHA256 of id.timestamp.body>", one per tenant secret,
// space-separated, so a receiver keeps verifying while its tenant rotates
// secrets). Failed attempts are retried with exponential backoff, a
// bounded number of times; every attempt leaves an audit record.
//
// The gateway decides where a callback may go (the tenant's policy,
// data.execgate.main.callback) when the execution is submitted; Sender
// connects only through the dialer it is given — the egress address rules
// (egress.Proxy.DialContext): no private ranges unless the platform opened
// them, whatever the name resolves to — and never follows a redirect.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/egress"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// Config is a tenant's webhook settings (tenants[].webhooks in the config
// file).
type Config struct {
	// Secrets sign the tenant's callbacks: each a reference ({file: path}
	// or {env: NAME}, never the value) to a Standard Webhooks secret
	// "whsec_<base64 of 24-64 random bytes>". Every listed secret signs
	// every delivery, so rotating is: add the new one, let receivers move
	// to it, remove the old one. None: the tenant cannot ask for callbacks.
	Secrets []toolconfig.Secret `yaml:"secrets" json:"secrets,omitempty"`
}

// MaxSecrets bounds Config.Secrets.
const MaxSecrets = 4

// maxSecretBytes bounds one webhook secret as read ("whsec_" and the
// base64 of at most 64 bytes).
const maxSecretBytes = 1 << 10

// Validate checks the shape of c (the secrets themselves are read at each
// delivery, so a rotated file takes effect without a restart).
func (c Config) Validate() error {
	if len(c.Secrets) > MaxSecrets {
		return fmt.Errorf("webhooks.secrets: %d secrets, at most %d", len(c.Secrets), MaxSecrets)
	}
	for i, s := range c.Secrets {
		if (s.File == "") == (s.Env == "") {
			return fmt.Errorf("webhooks.secrets[%d]: exactly one of file and env", i)
		}
		if s.File != "" && !strings.HasPrefix(s.File, "/") {
			return fmt.Errorf("webhooks.secrets[%d].file: must be an absolute path", i)
		}
	}
	return nil
}

// Keys reads c's secrets: the HMAC keys, in order. An error names the
// secret that cannot be used.
func (c Config) Keys(getenv func(string) string) ([][]byte, error) {
	if len(c.Secrets) == 0 {
		return nil, errors.New("the tenant has no webhook secrets (tenants[].webhooks.secrets)")
	}
	keys := make([][]byte, 0, len(c.Secrets))
	for i, s := range c.Secrets {
		v, err := s.Read(getenv, maxSecretBytes)
		if err != nil {
			return nil, fmt.Errorf("webhooks.secrets[%d]: %w", i, err)
		}
		k, err := DecodeSecret(v)
		if err != nil {
			return nil, fmt.Errorf("webhooks.secrets[%d]: %w", i, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// DecodeSecret is the HMAC key of a "whsec_<base64>" secret.
func DecodeSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, "whsec_")
	if !ok {
		return nil, errors.New(`a webhook secret starts with "whsec_"`)
	}
	k, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(k) < 16 || len(k) > 64 {
		return nil, errors.New("a webhook secret is whsec_ and the base64 of 16 to 64 bytes")
	}
	return k, nil
}

// Sign is the webhook-signature header of body for id at ts: one
// "v1,<signature>" per key, space-separated.
func Sign(keys [][]byte, id string, ts time.Time, body []byte) string {
	msg := make([]byte, 0, len(id)+len(body)+24)
	msg = append(append(append(append(msg, id...), '.'), strconv.FormatInt(ts.Unix(), 10)...), '.')
	msg = append(msg, body...)
	sigs := make([]string, len(keys))
	for i, k := range keys {
		m := hmac.New(sha256.New, k)
		m.Write(msg)
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	return strings.Join(sigs, " ")
}

// Auditor writes the record of a delivery attempt (*audit.Log).
type Auditor interface {
	Record(ctx context.Context, r audit.Record) error
}

// Options configure a Sender. Zero fields take the defaults.
type Options struct {
	// Dial connects to the receiver; required (egress.Proxy.DialContext).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxAttempts bounds the attempts of one delivery. Default 5.
	MaxAttempts int
	// Backoff is the wait before the second attempt, doubled before each
	// next one (with up to 20% jitter), at most MaxBackoff. Defaults 1 s
	// and 5 min.
	Backoff, MaxBackoff time.Duration
	// Timeout bounds one attempt (connect, send, answer). Default 10 s.
	Timeout time.Duration
	// Getenv reads env secrets. Default os.Getenv.
	Getenv func(string) string
	Now    func() time.Time
	Logger *slog.Logger
}

// Delivery is one callback to send.
type Delivery struct {
	URL string
	// Webhook is the tenant's webhook config (its secrets).
	Webhook Config
	// Type is the payload's event type, e.g. "execution.completed".
	Type string
	// Data is the payload's data (JSON).
	Data []byte
	// Record is the audit record each attempt's record starts from (the
	// execution's tenant, subject, outcome); Webhook is filled in.
	Record audit.Record
}

// Sender sends deliveries in the background. Drain waits for them.
type Sender struct {
	opt    Options
	client *http.Client
	audit  Auditor
	wg     sync.WaitGroup
	stop   chan struct{}
	once   sync.Once
}

// NewSender returns a Sender. It panics without opt.Dial (a wiring bug).
func NewSender(opt Options, a Auditor) *Sender {
	if opt.Dial == nil || a == nil {
		panic("webhook: NewSender needs a dialer and an auditor")
	}
	if opt.MaxAttempts <= 0 {
		opt.MaxAttempts = 5
	}
	if opt.Backoff <= 0 {
		opt.Backoff = time.Second
	}
	if opt.MaxBackoff <= 0 {
		opt.MaxBackoff = 5 * time.Minute
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 10 * time.Second
	}
	if opt.Getenv == nil {
		opt.Getenv = os.Getenv
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	tr := &http.Transport{
		Proxy:                 nil, // never the environment's proxy: the dialer decides
		DialContext:           opt.Dial,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          16,
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   opt.Timeout,
		ResponseHeaderTimeout: opt.Timeout,
	}
	return &Sender{
		opt:   opt,
		audit: a,
		stop:  make(chan struct{}),
		client: &http.Client{Transport: tr, Timeout: opt.Timeout,
			// A redirect could lead anywhere the policy did not grant.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	}
}

// Payload is the body of a delivery (Standard Webhooks' recommended
// envelope).
type Payload struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// Send starts delivering d in the background: attempts until one is
// answered 2xx, the receiver answers 410 Gone, or MaxAttempts are spent.
func (s *Sender) Send(d Delivery) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.deliver(d)
	}()
}

// Drain stops waiting between attempts (the current attempts finish; no
// new ones start) and waits for the deliveries, or ctx.
func (s *Sender) Drain(ctx context.Context) error {
	s.once.Do(func() { close(s.stop) })
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Sender) deliver(d Delivery) {
	id := "msg_" + newID()
	body, err := json.Marshal(Payload{Type: d.Type, Timestamp: s.opt.Now().UTC(), Data: d.Data})
	if err != nil { // cannot happen for valid JSON Data
		body = []byte(`{}`)
	}
	shown := shownURL(d.URL)
	for attempt := 1; ; attempt++ {
		status, final, err := s.attempt(d, id, body)
		delivered := err == nil
		final = final || delivered || attempt >= s.opt.MaxAttempts
		w := &audit.Webhook{ID: id, URL: shown, Attempt: attempt, Status: status, Delivered: delivered, Final: final}
		if err != nil {
			w.Error = sandbox.ClipEgressString(err.Error())
		}
		rec := d.Record
		rec.Webhook = w
		if aerr := s.audit.Record(context.Background(), rec); aerr != nil {
			s.opt.Logger.Error("webhook: the audit record of a delivery attempt could not be written",
				"execution_id", rec.ExecutionID, "tenant_id", rec.TenantID, "webhook_id", id, "err", aerr)
		}
		if final {
			return
		}
		t := time.NewTimer(s.backoff(attempt))
		select {
		case <-t.C:
		case <-s.stop:
			t.Stop()
			return
		}
	}
}

// backoff is the wait after attempt n (1-based).
func (s *Sender) backoff(n int) time.Duration {
	d := time.Duration(float64(s.opt.Backoff) * math.Pow(2, float64(n-1)))
	if d > s.opt.MaxBackoff || d <= 0 {
		d = s.opt.MaxBackoff
	}
	var b [1]byte
	_, _ = rand.Read(b[:])
	return d + d*time.Duration(b[0])/time.Duration(255*5) // up to +20%
}

// attempt sends one attempt. final: retrying cannot help (410 Gone, or
// the tenant's secrets cannot be used).
func (s *Sender) attempt(d Delivery, id string, body []byte) (status int, final bool, err error) {
	keys, err := d.Webhook.Keys(s.opt.Getenv)
	if err != nil {
		return 0, true, err
	}
	ts := s.opt.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.opt.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(body))
	if err != nil {
		return 0, true, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "execgate-webhook/1")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set("webhook-signature", Sign(keys, id, ts, body))
	resp, err := s.client.Do(req)
	if err != nil {
		// An address the rules refuse stays refused.
		return 0, errors.Is(err, egress.ErrAddressDenied), err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return resp.StatusCode, true, nil
	case resp.StatusCode == http.StatusGone:
		return resp.StatusCode, true, errors.New("the receiver answered 410 Gone: not retried")
	}
	return resp.StatusCode, false, fmt.Errorf("the receiver answered %d", resp.StatusCode)
}

// shownURL is u without query and fragment, clipped, for the audit record.
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return sandbox.ClipEgressString(raw)
	}
	u.RawQuery, u.Fragment, u.User = "", "", nil
	return sandbox.ClipEgressString(u.String())
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
