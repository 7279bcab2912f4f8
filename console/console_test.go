package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/execgate/execgate/console"
)

func get(t *testing.T, method, path string) *http.Response {
	t.Helper()
	w := httptest.NewRecorder()
	console.Handler().ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w.Result()
}

func TestEveryAssetIsServedWithItsTypeAndTheSecurityHeaders(t *testing.T) {
	for path, ctype := range map[string]string{
		"/ui/": "text/html", "/ui/app.js": "text/javascript", "/ui/dom.js": "text/javascript",
		"/ui/editor.js": "text/javascript", "/ui/playground.js": "text/javascript", "/ui/pages.js": "text/javascript",
		"/ui/artifacts.js": "text/javascript",
		"/ui/console.css":  "text/css", "/ui/favicon.svg": "image/svg+xml", "/ui/favicon.ico": "image/x-icon",
		console.FaviconPath: "image/x-icon",
	} {
		r := get(t, http.MethodGet, path)
		if r.StatusCode != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), ctype) {
			t.Errorf("%s: %d %q, want 200 %s", path, r.StatusCode, r.Header.Get("Content-Type"), ctype)
		}
		if r.Header.Get("Content-Security-Policy") != console.CSP || r.Header.Get("X-Content-Type-Options") != "nosniff" || r.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: security headers %v", path, r.Header)
		}
	}
}

// Browsers ask every origin for /favicon.ico; a 404 there is an error in
// the console of every page. It is an ICO holding a PNG, and the page links
// the SVG.
func TestTheFaviconIsServedAtTheRootAndLinkedByThePage(t *testing.T) {
	r := get(t, http.MethodGet, console.FaviconPath)
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != http.StatusOK || len(b) < 22+8 || string(b[:4]) != "\x00\x00\x01\x00" || string(b[22:26]) != "\x89PNG" {
		t.Fatalf("%s: %d, %d bytes starting %q: want an ICO holding a PNG", console.FaviconPath, r.StatusCode, len(b), b[:min(len(b), 8)])
	}
	html, _ := io.ReadAll(get(t, http.MethodGet, "/ui/").Body)
	if !strings.Contains(string(html), `<link rel="icon" href="/ui/favicon.svg" type="image/svg+xml">`) {
		t.Fatal("index.html does not link the icon")
	}
}

func TestTheConsoleRefusesWhatIsNotAnAsset(t *testing.T) {
	for _, tc := range []struct {
		name, method, path string
		status             int
	}{
		{"a missing file", http.MethodGet, "/ui/nope.js", http.StatusNotFound},
		{"a path escaping the assets", http.MethodGet, "/ui/../console.go", http.StatusNotFound},
		{"the Go source beside the assets", http.MethodGet, "/ui/assets/index.html", http.StatusNotFound},
		{"a write", http.MethodPost, "/ui/", http.StatusMethodNotAllowed},
		{"/ui without the slash", http.MethodGet, "/ui", http.StatusMovedPermanently},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := get(t, tc.method, tc.path); r.StatusCode != tc.status {
				t.Fatalf("%s %s: %d, want %d", tc.method, tc.path, r.StatusCode, tc.status)
			}
		})
	}
}

// The CSP forbids inline code and other origins; the page must need
// neither.
func TestTheHTMLHasNoInlineScriptsStylesHandlersOrOtherOrigins(t *testing.T) {
	b, _ := io.ReadAll(get(t, http.MethodGet, "/ui/").Body)
	html := string(b)
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(html, -1) {
		if !strings.Contains(tag, ` src="/ui/`) {
			t.Errorf("inline or foreign script: %s", tag)
		}
	}
	for _, re := range []string{`\sstyle=`, `\son[a-z]+=`, `<style`, `(src|href)="(https?:)?//`} {
		if m := regexp.MustCompile(re).FindString(html); m != "" {
			t.Errorf("index.html has %q (%s)", m, re)
		}
	}
}

// The CSP lets the page draw an artifact's image from a blob: URL it made
// of the bytes, and nothing more: no data: URLs, no other origin, no
// inline code.
func TestTheCSPAllowsBlobImagesAndNothingMore(t *testing.T) {
	directives := map[string]string{}
	for _, d := range strings.Split(console.CSP, ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
		directives[name] = value
	}
	if got := directives["img-src"]; got != "'self' blob:" {
		t.Errorf("img-src %q, want 'self' blob:", got)
	}
	for name, value := range directives {
		if name == "img-src" {
			continue
		}
		if strings.Contains(value, "blob:") || strings.Contains(value, "data:") || strings.Contains(value, "unsafe") || strings.Contains(value, "*") {
			t.Errorf("%s %q allows more than the origin", name, value)
		}
	}
	if directives["default-src"] != "'self'" || directives["object-src"] != "'none'" {
		t.Errorf("default-src %q, object-src %q", directives["default-src"], directives["object-src"])
	}
}
