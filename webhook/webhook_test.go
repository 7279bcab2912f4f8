package webhook

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// The Standard Webhooks specification's own example: secret, id,
// timestamp and payload give this signature.
func TestSignMatchesTheStandardWebhooksExample(t *testing.T) {
	key, err := DecodeSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := Sign([][]byte{key}, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
	two := Sign([][]byte{key, []byte("0123456789abcdef")}, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if sigs := strings.Fields(two); len(sigs) != 2 || sigs[0] != got {
		t.Fatalf("two secrets sign %q", two)
	}
}

func TestDecodeSecretRefusesWhatIsNotAWebhookSecret(t *testing.T) {
	for _, s := range []string{"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_", "whsec_!!!", "whsec_c2hvcnQ="} {
		if _, err := DecodeSecret(s); err == nil {
			t.Errorf("DecodeSecret(%q) accepted", s)
		}
	}
}

type records struct {
	mu  sync.Mutex // guards got
	got []audit.Record
}

func (r *records) Record(_ context.Context, rec audit.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, rec)
	return nil
}

// A receiver that keeps failing gets MaxAttempts attempts, each audited,
// the last final; 410 Gone stops at once.
func TestDeliveryRetriesABoundedNumberOfTimesAndAuditsEachAttempt(t *testing.T) {
	t.Setenv("WHSEC_TEST", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	cfg := Config{Secrets: []toolconfig.Secret{{Env: "WHSEC_TEST"}}}
	for _, tc := range []struct {
		name     string
		status   int
		attempts int
	}{
		{"a failing receiver", http.StatusInternalServerError, 3},
		{"a receiver that is gone", http.StatusGone, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var stamps []time.Time
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				stamps = append(stamps, time.Now())
				mu.Unlock()
				w.WriteHeader(tc.status)
			}))
			defer srv.Close()
			rec := &records{}
			d := &net.Dialer{}
			s := NewSender(Options{Dial: d.DialContext, MaxAttempts: 3, Backoff: 50 * time.Millisecond}, rec)
			s.Send(Delivery{URL: srv.URL + "/h?k=v", Webhook: cfg, Type: "t", Data: []byte(`{}`), Record: audit.Record{ExecutionID: "x", TenantID: "t"}})
			deadline := time.Now().Add(10 * time.Second)
			for {
				rec.mu.Lock()
				n := len(rec.got)
				rec.mu.Unlock()
				if n == tc.attempts || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond) // polling the auditor
			}
			if err := s.Drain(context.Background()); err != nil {
				t.Fatal(err)
			}
			if len(rec.got) != tc.attempts || len(stamps) != tc.attempts {
				t.Fatalf("%d audited attempts, %d received, want %d", len(rec.got), len(stamps), tc.attempts)
			}
			for i, r := range rec.got {
				w := r.Webhook
				if w == nil || w.Attempt != i+1 || w.Status != tc.status || w.Delivered || w.Final != (i == tc.attempts-1) || strings.Contains(w.URL, "k=v") {
					t.Fatalf("attempt %d recorded %+v", i+1, w)
				}
			}
			for i := 1; i < len(stamps); i++ { // exponential: ≥ 50 ms, then ≥ 100 ms
				if gap, min := stamps[i].Sub(stamps[i-1]), 50*time.Millisecond<<(i-1); gap < min {
					t.Fatalf("attempt %d came %v after the previous, want ≥ %v", i+1, gap, min)
				}
			}
		})
	}
}
