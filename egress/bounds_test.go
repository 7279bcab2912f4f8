package egress

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/execgate/execgate/sandbox"
)

// Issue #10 class 3: a tool chooses the hosts it asks for and how often. A
// run of 1000 attempts, some with 500 KB hosts, must leave at most
// sandbox.MaxEgressAttempts attempts with clipped strings and a count of the
// rest, however the proxy refused them (by net/http before parsing, by its
// own length checks, or by the allow-list).
func TestSession_BoundsWhatAToolCanMakeItRecord(t *testing.T) {
	f := newSpellingFixture(t, func(p string) []string { return []string{"api.test:" + p} })
	huge := strings.Repeat("a", 500<<10) + ".example.com"
	long := strings.Repeat("b", 5<<10) + ".example.com"
	const total, hugeN = 1000, 40
	// The attack: 40 attempts with 500 KB hosts. net/http lingers
	// about half a second on each connection it refuses, so they go in
	// parallel.
	codes := make(chan int, hugeN)
	for range hugeN {
		go func() { codes <- f.connect(t, huge+":443") }()
	}
	for range hugeN {
		if code := <-codes; code != 0 && code != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("a 500 KB CONNECT answered %d, want 431 or a cut connection", code)
		}
	}
	for i := hugeN; i < total; i++ {
		var code int
		switch {
		case i < 60: // under the header cap: refused by the proxy's own checks
			if code = f.connect(t, long+":443"); code != http.StatusBadRequest {
				t.Fatalf("a 5 KB CONNECT answered %d, want 400", code)
			}
		case i < 80: // a request target over the proxy's cap
			if code = f.get(t, "api.test:"+f.port+"/"+strings.Repeat("p", 9<<10)); code != http.StatusRequestURITooLong {
				t.Fatalf("a 9 KB request target answered %d, want 414", code)
			}
		default:
			if code = f.connect(t, "evil.example.com:443"); code != http.StatusForbidden {
				t.Fatalf("CONNECT off the list answered %d, want 403", code)
			}
		}
	}
	got := f.attempts(t, total)
	if len(got) != sandbox.MaxEgressAttempts || f.sess.Dropped() != total-sandbox.MaxEgressAttempts {
		t.Fatalf("kept %d attempts and dropped %d, want %d kept and %d dropped",
			len(got), f.sess.Dropped(), sandbox.MaxEgressAttempts, total-sandbox.MaxEgressAttempts)
	}
	for _, a := range f.sess.Attempts() {
		if a.Allowed {
			t.Errorf("attempt allowed: %+v", a)
		}
		if len(a.Host) > sandbox.MaxEgressFieldBytes || len(a.Reason) > sandbox.MaxEgressFieldBytes || a.Reason == "" {
			t.Fatalf("attempt not bounded (host %d bytes, reason %d bytes): %.300q", len(a.Host), len(a.Reason), a.Host)
		}
	}
	b, _ := json.Marshal(f.sess.Attempts())
	if max := sandbox.MaxEgressAttempts * 1024; len(b) > max {
		t.Fatalf("the kept attempts encode to %d bytes, over %d", len(b), max)
	}
}

// ClipEgressString keeps short clean strings, clips long ones to the field
// cap with a marker, and replaces what JSON would escape, so the encoded
// field is bounded too.
func TestClipEgressString(t *testing.T) {
	if got := sandbox.ClipEgressString("api.example.com"); got != "api.example.com" {
		t.Errorf("clean host changed: %q", got)
	}
	got := sandbox.ClipEgressString(strings.Repeat("\x00", 1<<20))
	b, _ := json.Marshal(got)
	if len(got) != sandbox.MaxEgressFieldBytes || !strings.HasSuffix(got, "...") || len(b) > sandbox.MaxEgressFieldBytes+2 {
		t.Errorf("clipped to %d bytes (%d encoded): %.40q", len(got), len(b), got)
	}
	if got := sandbox.ClipEgressString("a\"b\\c\u00fc"); got != "a?b?c??" {
		t.Errorf("got %q", got)
	}
}
