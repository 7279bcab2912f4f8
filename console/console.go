// Package console is the web console served at /ui/: a few static files
// (HTML, CSS, plain JavaScript modules) embedded in the binary, with no
// build step. It has no powers of its own: the page signs in with a token
// the user pastes (kept in sessionStorage, never a cookie, so there is no
// CSRF) and calls the public API with it, so every page shows exactly what
// that token's roles may see.
//
// The files are served with a strict Content-Security-Policy (same origin
// only, no inline scripts or styles, no framing) and nosniff; the scripts
// render every piece of tool output and API data as text; the only tool
// bytes drawn are image artifacts, as <img> of a blob: URL.
//
// The icon is assets/favicon.svg (linked by the page) and the same drawing
// as assets/favicon.ico, served at /favicon.ico too: a browser asks for that
// on every document of the origin, and a 404 there is an error in its
// console.
package console

//go:generate go run favicon_gen.go

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed assets
var assets embed.FS

// Prefix is where the console is served.
const Prefix = "/ui/"

// FaviconPath is the icon browsers ask every origin for; the console
// serves it (the same file as /ui/favicon.ico).
const FaviconPath = "/favicon.ico"

// CSP is the console's Content-Security-Policy. Images come from the
// origin, or from blob: URLs the page makes of an artifact's bytes (its
// preview of PNG, JPEG, GIF and WebP artifacts); nothing else.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob:; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Handler serves the console under Prefix: /ui/ is index.html, /ui/x the
// asset x; and FaviconPath. Only GET and HEAD; anything else is 405.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic("console: embedded assets missing: " + err.Error()) // a build mistake
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cache-Control", "no-cache")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == strings.TrimSuffix(Prefix, "/") {
			http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
			return
		}
		name := strings.TrimPrefix(path.Clean(r.URL.Path), Prefix)
		switch {
		case name == "/" || name == "" || name == path.Clean(Prefix):
			name = "index.html"
		case r.URL.Path == FaviconPath:
			name = "favicon.ico"
		}
		ct := contentType(name)
		b, err := fs.ReadFile(sub, name)
		if err != nil || ct == "" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		h.Set("Content-Type", ct)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
	})
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".ico":
		return "image/x-icon"
	}
	return ""
}
