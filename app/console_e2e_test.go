package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/tenancy"
)

// The web console (issue #18) in a real headless Chromium against a real
// gateway with the real sandbox. Screenshots of every page go to
// $CONSOLE_SCREENSHOTS (default: a temp dir, logged).

// browser is one headless Chromium tab on the console.
type browser struct {
	t     *testing.T
	ctx   context.Context
	base  string
	shots string
	watch *pageWatch
}

// pageWatch collects what the browser reports about the pages the test
// visits that the test requires to be none: console errors and warnings,
// uncaught exceptions, browser log entries (network, security, …) of level
// error or warning, responses with an HTTP error status and requests that
// failed. The only exceptions are HTTP error statuses a step declares it
// expects (expectHTTP): a 403 PolicyDenied is the API's answer, not a
// fault of the page.
type pageWatch struct {
	mu       sync.Mutex
	problems []string
	expected []*expectedHTTP
	urls     map[network.RequestID]string
}

// expectedHTTP is an HTTP error status a step expects on a path prefix.
type expectedHTTP struct {
	status int64
	path   string
}

func (w *pageWatch) expects(status int64, rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil {
		return false
	}
	for _, e := range w.expected {
		if strings.HasPrefix(u.Path, e.path) && (status == 0 || status == e.status) {
			return true
		}
	}
	return false
}

// event is called for every event of the tab, on the goroutine that reads
// them (chromedp.Listen): it only records.
func (w *pageWatch) event(ev any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	add := func(format string, args ...any) { w.problems = append(w.problems, fmt.Sprintf(format, args...)) }
	switch e := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		desc := d.Text
		if d.Exception != nil {
			desc += " " + d.Exception.Description
		}
		add("uncaught exception at %s:%d: %s", d.URL, d.LineNumber+1, desc)
	case *runtime.EventConsoleAPICalled:
		if e.Type != runtime.ConsoleAPICalledTypeError && e.Type != runtime.ConsoleAPICalledTypeWarning && e.Type != runtime.ConsoleAPICalledTypeAssert {
			return
		}
		var parts []string
		for _, a := range e.Args {
			if len(a.Value) > 0 {
				parts = append(parts, string(a.Value))
			} else {
				parts = append(parts, a.Description)
			}
		}
		add("console.%s: %s", e.Type, strings.Join(parts, " "))
	case *log.EventEntryAdded:
		en := e.Entry
		if en.Level != log.EntryLevelError && en.Level != log.EntryLevelWarning {
			return
		}
		if en.Source == log.EntrySourceNetwork && w.expects(0, en.URL) {
			return // the response itself was checked against its status
		}
		add("browser log (%s %s): %s %s", en.Source, en.Level, en.Text, en.URL)
	case *network.EventRequestWillBeSent:
		w.urls[e.RequestID] = e.Request.URL
	case *network.EventResponseReceived:
		if r := e.Response; r.Status >= 400 && !w.expects(r.Status, r.URL) {
			add("HTTP %d for %s", r.Status, r.URL)
		}
	case *network.EventLoadingFailed:
		// A request cancelled by a navigation (or by the page) is not a
		// failure of the page.
		if !e.Canceled {
			add("request for %s failed: %s %s", w.urls[e.RequestID], e.ErrorText, e.BlockedReason)
		}
	}
}

// take returns the problems seen so far and forgets them.
func (w *pageWatch) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.problems
	w.problems = nil
	return p
}

// expectHTTP declares that the calling step expects the API to answer
// status on paths under path (the page renders it); the returned func ends
// the expectation. Every other HTTP error status fails the test.
func (b *browser) expectHTTP(status int64, path string) func() {
	b.watch.mu.Lock()
	defer b.watch.mu.Unlock()
	e := &expectedHTTP{status, path}
	b.watch.expected = append(b.watch.expected, e)
	return func() {
		b.watch.mu.Lock()
		defer b.watch.mu.Unlock()
		b.watch.expected = slices.DeleteFunc(b.watch.expected, func(x *expectedHTTP) bool { return x == e })
	}
}

// chromiumPath finds the browser; without one the test skips, and fails
// under CI=true.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("EXECGATE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.SkipUnlessCI(t, "no Chromium on PATH (apt-get install chromium); set EXECGATE_CHROMIUM to use another")
	return ""
}

// pageProbe is installed in every document before its scripts run: it
// collects uncaught errors and Content-Security-Policy violations, which
// the test then requires to be none.
const pageProbe = `window.__problems = [];
window.addEventListener("error", (e) => window.__problems.push("error: " + e.message));
window.addEventListener("unhandledrejection", (e) => window.__problems.push("rejection: " + e.reason));
document.addEventListener("securitypolicyviolation", (e) => window.__problems.push("CSP: " + e.violatedDirective + " " + e.blockedURI));`

func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	path := chromiumPath(t)
	// Chromium's own temporary files (its singleton socket's
	// org.chromium.Chromium.* dir) go where the test removes them; a short
	// path, as a unix socket's must be (t.TempDir's is too long).
	tmp, err := os.MkdirTemp("", "eg-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) }) // after the browser's end (cleanups run last first)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // the tests run as root, where Chromium's own sandbox cannot start
		chromedp.WindowSize(1400, 1000),
		chromedp.Env("TMPDIR="+tmp),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	watch := &pageWatch{urls: map[network.RequestID]string{}}
	if err := chromedp.Listen(ctx, watch.event); err != nil {
		t.Fatalf("starting Chromium (%s): %v", path, err)
	}
	if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: pageProbe})
		return err
	})); err != nil {
		t.Fatalf("starting Chromium (%s): %v", path, err)
	}
	shots := os.Getenv("CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("console screenshots: %s", shots)
	b := &browser{t: t, ctx: ctx, base: base, shots: shots, watch: watch}
	// Whatever no step checked fails the test at its end: every page it
	// visited is held to no console errors and no failed requests.
	t.Cleanup(func() {
		if p := watch.take(); len(p) > 0 {
			t.Errorf("the browser reported problems on the pages visited:\n  %s", strings.Join(p, "\n  "))
		}
	})
	return b
}

// on returns the browser for a subtest: its failures are the subtest's.
func (b *browser) on(t *testing.T) *browser {
	c := *b
	c.t = t
	return &c
}

// do runs actions with a deadline (the machine is shared and slow).
func (b *browser) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %v\nproblems on the page: %v", err, b.problemsNoFail())
	}
}

// eval evaluates a JavaScript expression (promises awaited) into out.
func (b *browser) eval(expr string, out any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluating %.200s: %v", expr, err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			b.t.Fatalf("evaluating %.200s: result %s: %v", expr, raw, err)
		}
	}
}

func (b *browser) text(expr string) string {
	b.t.Helper()
	var s string
	b.eval(expr, &s)
	return s
}

// waitFor polls a JavaScript condition until it is true (polling with a
// deadline, never a fixed sleep).
func (b *browser) waitFor(what, cond string) {
	b.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var ok bool
		b.eval("!!("+cond+")", &ok)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			b.screenshot("timeout-" + strings.NewReplacer(" ", "-", "/", "-").Replace(what))
			b.t.Fatalf("waiting for %s (%s): timed out; page problems %v", what, cond, b.problemsNoFail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *browser) problemsNoFail() []string {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](`window.__problems || []`))
	if err != nil {
		return []string{err.Error()}
	}
	var p []string
	_ = json.Unmarshal(raw, &p)
	return p
}

// noProblems fails the test on any uncaught error or CSP violation in the
// page, and on anything the browser reported (pageWatch) since the last
// check.
func (b *browser) noProblems() {
	b.t.Helper()
	p := b.problemsNoFail()
	if w := b.watch.take(); len(w) > 0 {
		p = append(p, w...)
	}
	if len(p) > 0 {
		b.t.Fatalf("problems on the page:\n  %s", strings.Join(p, "\n  "))
	}
}

func (b *browser) screenshot(name string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return ""
	}
	p := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	return p
}

// signIn opens the console, signs in with tok and opens page.
func (b *browser) signIn(tok, page string) {
	b.t.Helper()
	// Another document of the origin first, so the console starts afresh.
	b.do(chromedp.Navigate(b.base+"/healthz"),
		chromedp.Evaluate[chromedp.Void](`sessionStorage.clear()`),
		chromedp.Navigate(b.base+"/ui/#"+page),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SetValue(chromedp.ID("token"), tok),
		chromedp.Click(chromedp.CSS(`#signin-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("nav")),
	)
}

func (b *browser) setField(id, value string) {
	b.t.Helper()
	v, _ := json.Marshal(value)
	b.eval(fmt.Sprintf(`(() => { const el = document.getElementById(%q); el.value = %s; el.dispatchEvent(new Event("input", {bubbles: true})); el.dispatchEvent(new Event("change", {bubbles: true})); return true })()`, id, v), nil)
}

func (b *browser) run(source string) {
	b.t.Helper()
	b.setField("pg-source", source)
	b.eval(`document.getElementById("pg-out").replaceChildren(); true`, nil)
	b.do(chromedp.Click(chromedp.ID("pg-run")))
	b.waitFor("the envelope", `document.querySelector("#pg-status .badge")`)
}

// A tool that burns some CPU (so the day's budget shows use), then fails
// in a helper on line 4.
const failingTool = `def helper(n):
    total = sum(i * i for i in range(n))
    if total > 0:
        raise ValueError("bad input %d" % n)

def run(args, context):
    return helper(400000)
`

func TestConsoleInAHeadlessBrowser(t *testing.T) {
	s := start(t, setup{})
	b := newBrowser(t, s.app.URL())
	executor := s.token("demo", tenancy.RoleExecutor)

	t.Run("the console is served with a strict CSP and nosniff", func(t *testing.T) {
		resp, err := http.Get(s.app.URL() + "/ui/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("CSP %q lacks %q", csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("CSP allows inline code: %q", csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Errorf("headers: %v", resp.Header)
		}
	})

	t.Run("an executor signs in, runs the probe and sees ok with the result tree", func(t *testing.T) {
		b := b.on(t)
		b.signIn(executor, "playground")
		b.run("async def run(args, context):\n    return {\"ok\": True, \"nested\": {\"n\": [1, 2, 3]}}\n")
		if got := b.text(`document.querySelector("#pg-status .badge").textContent`); got != "ok" {
			t.Fatalf("status badge %q, want ok", got)
		}
		tree := b.text(`document.getElementById("pg-result").innerText`)
		for _, want := range []string{`"ok": true`, `"nested": {1}`, `"n": [3]`} {
			if !strings.Contains(tree, want) {
				t.Errorf("result tree lacks %q:\n%s", want, tree)
			}
		}
		var bars int
		b.eval(`document.querySelectorAll("#pg-usage .bar").length`, &bars)
		if bars != 3 {
			t.Errorf("%d usage bars, want 3 (wall, CPU, memory)", bars)
		}
		// Every control has an accessible name (a label or aria-label).
		var unlabelled []string
		b.eval(`[...document.querySelectorAll("input, select, textarea, button")].filter(el =>
			!(el.labels && el.labels.length) && !el.getAttribute("aria-label") && !el.textContent.trim()).map(el => el.id || el.outerHTML.slice(0, 60))`, &unlabelled)
		if len(unlabelled) > 0 {
			t.Errorf("controls without a label: %v", unlabelled)
		}
		b.noProblems()
		shot := b.screenshot("playground")
		if out := os.Getenv("CONSOLE_README_SHOT"); out != "" && shot != "" {
			// go test ./app -run TestConsole with CONSOLE_README_SHOT=$PWD/docs/console-playground.png
			png, _ := os.ReadFile(shot)
			if err := os.WriteFile(out, png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		b.do(chromedp.EmulateViewport(390, 844))
		b.screenshot("playground-phone")
		var overflow bool
		b.eval(`document.documentElement.scrollWidth > window.innerWidth + 1`, &overflow)
		b.do(chromedp.EmulateViewport(1400, 1000))
		if overflow {
			t.Errorf("the playground scrolls sideways at a phone width (390 px)")
		}
	})

	t.Run("tool output is rendered as text, never as markup", func(t *testing.T) {
		b := b.on(t)
		b.run("def run(args, context):\n    print('<img id=\"xss\" src=x onerror=\"window.__pwned=1\">')\n    return '<b id=\"xss2\">'\n")
		var injected bool
		b.eval(`!!(document.getElementById("xss") || document.getElementById("xss2") || window.__pwned)`, &injected)
		if injected {
			t.Fatal("tool output became markup")
		}
		if got := b.text(`document.getElementById("pg-stdout").textContent`); !strings.Contains(got, `<img id="xss"`) {
			t.Fatalf("stdout %q does not show the output as text", got)
		}
	})

	t.Run("a failing tool's error line is highlighted and linked from the traceback", func(t *testing.T) {
		b := b.on(t)
		b.run(failingTool)
		if got := b.text(`document.querySelector("#pg-status .badge").textContent`); got != "error: ToolError" {
			t.Fatalf("status badge %q, want error: ToolError", got)
		}
		var marked []int
		b.eval(`[...document.querySelectorAll("#pg-highlight .line")].map((l, i) => l.classList.contains("err") ? i + 1 : 0).filter(Boolean)`, &marked)
		if len(marked) != 1 || marked[0] != 4 {
			t.Fatalf("highlighted editor lines %v, want [4]", marked)
		}
		if g := b.text(`document.querySelector("#pg-gutter .err").textContent`); g != "4" {
			t.Fatalf("gutter marks line %q, want 4", g)
		}
		var links []string
		b.eval(`[...document.querySelectorAll("#pg-traceback a.line-link")].map(a => a.dataset.line)`, &links)
		if strings.Join(links, ",") != "7,4" {
			t.Fatalf("traceback links to lines %v, want the user frames [7 4]", links)
		}
		b.do(chromedp.Click(chromedp.CSS(`#pg-traceback a.line-link[data-line="4"]`)))
		var caret int
		b.eval(`document.getElementById("pg-source").selectionStart`, &caret)
		if want := len("def helper(n):\n    total = sum(i * i for i in range(n))\n    if total > 0:\n"); caret != want {
			t.Fatalf("clicking the frame put the caret at %d, want %d (start of line 4)", caret, want)
		}
		b.noProblems()
		b.screenshot("playground-error")
	})

	t.Run("Validate marks a syntax error's line", func(t *testing.T) {
		b := b.on(t)
		b.setField("pg-source", "def run(args, context):\n    x = 1\n    return (x\n")
		b.eval(`document.getElementById("pg-out").replaceChildren(); true`, nil)
		b.do(chromedp.Click(chromedp.ID("pg-validate")))
		b.waitFor("the verdict", `document.querySelector("#pg-status .badge")`)
		if got := b.text(`document.querySelector("#pg-status .badge").textContent`); got != "invalid" {
			t.Fatalf("validate badge %q, want invalid", got)
		}
		if g := b.text(`(document.querySelector("#pg-gutter .err") || {}).textContent || ""`); g != "3" {
			t.Fatalf("line %q marked for the unclosed parenthesis, want 3: %s", g, b.text(`document.getElementById("pg-out").innerText`))
		}
	})

	t.Run("a denied request shows the policy reasons", func(t *testing.T) {
		b := b.on(t)
		b.setField("pg-network", "host") // demo may use network none only
		b.run("def run(args, context):\n    return 1\n")
		b.setField("pg-network", "none")
		if got := b.text(`document.querySelector("#pg-status .badge").textContent`); got != "error: PolicyDenied" {
			t.Fatalf("status badge %q, want error: PolicyDenied", got)
		}
		var reasons []string
		b.eval(`[...document.querySelectorAll("#pg-reasons li")].map(li => li.textContent)`, &reasons)
		if len(reasons) == 0 || !strings.Contains(strings.Join(reasons, " "), "host") {
			t.Fatalf("reasons %q: want the policy's reason about network host", reasons)
		}
		b.screenshot("playground-denied")
	})

	t.Run("test mode sends the fixtures and forces network none", func(t *testing.T) {
		b := b.on(t)
		b.eval(`document.getElementById("pg-test").click(); true`, nil)
		b.setField("pg-network", "host") // test mode must override it
		b.setField("pg-variables", `{"who": "fixture-value"}`)
		b.run("def run(args, context):\n    return {\"who\": context.variables[\"who\"]}\n")
		b.eval(`document.getElementById("pg-test").click(); true`, nil)
		if got := b.text(`document.querySelector("#pg-status .badge").textContent`); got != "ok" {
			t.Fatalf("status badge %q, want ok: %s", got, b.text(`document.getElementById("pg-out").innerText`))
		}
		if tree := b.text(`document.getElementById("pg-result").innerText`); !strings.Contains(tree, `"fixture-value"`) {
			t.Fatalf("result %q: want the fixture variable", tree)
		}
		if out := b.text(`document.getElementById("pg-out").innerText`); !strings.Contains(out, "network none") {
			t.Fatalf("envelope %q: want the decision's network none", out)
		}
		// Outside test mode variables are refused in the page (the API
		// allows fixtures only in test mode).
		b.eval(`document.getElementById("pg-out").replaceChildren(); document.getElementById("pg-run").click(); true`, nil)
		b.waitFor("the form error", `document.getElementById("pg-form-error").textContent.includes("test-mode")`)
		b.setField("pg-variables", "{}")
		b.setField("pg-network", "none")
	})

	t.Run("the policy lab shows the exact input and each deny reason, and diffs two role sets", func(t *testing.T) {
		b := b.on(t)
		b.signIn(s.token("demo", tenancy.RolePolicyAuthor), "policy")
		b.setField("pl-request", `{"source": "def run(args, context):\n    return 1\n", "network_access": "host"}`)
		b.setField("pl-roles-b", "admin")
		b.do(chromedp.Click(chromedp.CSS(`#pl-form button[type=submit]`)))
		b.waitFor("the decision", `document.getElementById("pl-a-input") && document.getElementById("pl-diff")`)
		var input struct {
			Version int `json:"version"`
			Tenant  struct {
				ID string `json:"id"`
			} `json:"tenant"`
			Request struct {
				NetworkAccess string `json:"network_access"`
			} `json:"request"`
		}
		if err := json.Unmarshal([]byte(b.text(`document.getElementById("pl-a-input").textContent`)), &input); err != nil {
			t.Fatalf("the input pane is not the JSON input document: %v", err)
		}
		if input.Version != 1 || input.Tenant.ID != "demo" || input.Request.NetworkAccess != "host" {
			t.Fatalf("input document %+v: want version 1, tenant demo, network host", input)
		}
		if got := b.text(`document.querySelector("#pl-a .badge").textContent`); got != "deny" {
			t.Fatalf("decision badge %q, want deny", got)
		}
		var reasons int
		b.eval(`document.querySelectorAll("#pl-a .reasons li").length`, &reasons)
		var changed int
		b.eval(`document.querySelectorAll("#pl-diff .add, #pl-diff .del").length`, &changed)
		if reasons == 0 || changed == 0 {
			t.Fatalf("%d deny reasons, %d diff lines: want both", reasons, changed)
		}
		b.noProblems()
		b.screenshot("policy-lab")
	})

	t.Run("an admin edits a quota and the bar changes", func(t *testing.T) {
		b := b.on(t)
		admin := s.token("demo", tenancy.RoleAdmin)
		b.signIn(admin, "quotas")
		bar := `document.getElementById("q-demo-budget")`
		b.waitFor("the demo tenant's budget bar", bar)
		var before struct{ Pct, Max string }
		b.eval(`({pct: `+bar+`.dataset.pct, max: `+bar+`.dataset.max})`, &before)
		if before.Max != "3600000" {
			t.Fatalf("budget bar max %q, want 3600000 ms (the demo quota)", before.Max)
		}
		// Validation first: burst 0 with a rate is refused in the page.
		form := `document.querySelector("#q-demo form")`
		b.eval(form+`.elements.burst.value = "0"; true`, nil)
		b.do(chromedp.Click(chromedp.CSS(`#q-demo form button[type=submit]`)))
		b.waitFor("the validation message", form+`.querySelector(".error").textContent.includes("burst")`)
		b.eval(form+`.elements.burst.value = "20"; `+form+`.elements.daily_cpu_seconds.value = "1"; `+form+`.elements.max_queued.value = "3"; true`, nil)
		b.do(chromedp.Click(chromedp.CSS(`#q-demo form button[type=submit]`)))
		b.waitFor("the new budget", bar+` && `+bar+`.dataset.max === "1000"`)
		var after struct{ Pct, Max string }
		b.eval(`({pct: `+bar+`.dataset.pct, max: `+bar+`.dataset.max})`, &after)
		var pb, pa float64
		fmt.Sscan(before.Pct, &pb)
		fmt.Sscan(after.Pct, &pa)
		if !(pa > pb) {
			t.Fatalf("budget bar %.3f%% → %.3f%%: want it fuller against 1 s a day", pb, pa)
		}
		if r := s.do("GET", "/v1/admin/tenants/demo/quota", admin, nil); !strings.Contains(string(r.body), `"daily_cpu_seconds":1,"max_queued":3`) {
			t.Fatalf("the API does not show the override: %s", r.body)
		}
		b.noProblems()
		b.screenshot("quotas")
		s.do("DELETE", "/v1/admin/tenants/demo/quota", admin, nil)
	})

	t.Run("an auditor finds a failed run and opens its decision, usage and trace id", func(t *testing.T) {
		b := b.on(t)
		auditor := s.token("demo", tenancy.RoleAuditor)
		b.signIn(auditor, "runs")
		b.waitFor("the first search", `document.querySelector("#r-results p")`)
		b.setField("r-type", "ToolError")
		b.eval(`document.getElementById("r-results").replaceChildren(); true`, nil)
		b.do(chromedp.Click(chromedp.CSS(`#r-form button[type=submit]`)))
		b.waitFor("the results", `document.querySelector("#r-table tbody tr")`)
		var outcomes []string
		b.eval(`[...document.querySelectorAll("#r-table tbody tr")].map(tr => tr.children[3].textContent)`, &outcomes)
		if len(outcomes) != 1 || outcomes[0] != "ToolError" {
			t.Fatalf("rows %v, want the one ToolError run", outcomes)
		}
		var failed []map[string]any
		for _, rec := range s.auditLines() {
			if o, _ := rec["outcome"].(map[string]any); o["error_type"] == "ToolError" {
				failed = append(failed, rec)
			}
		}
		if len(failed) != 1 {
			t.Fatalf("%d ToolError audit records, want 1", len(failed))
		}
		traceID, _ := failed[0]["trace_id"].(string)
		// The run's spans: a waterfall when the gateway kept them, else
		// the note that they went to the collector (a 404 the page
		// expects).
		kept := s.tracesStatus(t, auditor, traceID)
		if kept == http.StatusNotFound {
			defer b.expectHTTP(http.StatusNotFound, "/v1/admin/traces/")()
		}
		b.do(chromedp.Click(chromedp.CSS(`#r-table tbody tr`)))
		b.waitFor("the run's detail", `document.getElementById("r-trace")`)
		if tr := b.text(`document.getElementById("r-trace").textContent`); tr != traceID || len(tr) != 32 {
			t.Fatalf("trace id %q, want the record's %q", tr, traceID)
		}
		switch kept {
		case http.StatusNotFound:
			b.waitFor("the collector note", `document.getElementById("r-spans-note")`)
			if note := b.text(`document.getElementById("r-spans-note").textContent`); !strings.Contains(note, "exported to your collector") || !strings.Contains(note, traceID) {
				t.Fatalf("spans note %q", note)
			}
		case http.StatusOK:
			b.waitFor("the waterfall", `document.querySelector("#r-waterfall .span-row")`)
		default:
			t.Fatalf("GET /v1/admin/traces/%s answered %d to an auditor", traceID, kept)
		}
		b.noProblems()
		b.screenshot("runs")
	})

	t.Run("a tenant-admin's run page does not ask for the trace it may not read", func(t *testing.T) {
		b := b.on(t)
		b.signIn(s.token("demo", tenancy.RoleTenantAdmin), "runs")
		b.waitFor("the runs", `document.querySelector("#r-table tbody tr")`)
		b.do(chromedp.Click(chromedp.CSS(`#r-table tbody tr`)))
		b.waitFor("the spans note", `document.getElementById("r-spans-note")`)
		if note := b.text(`document.getElementById("r-spans-note").textContent`); !strings.Contains(note, "shown to admin and auditor tokens") {
			t.Fatalf("spans note %q", note)
		}
		b.noProblems() // a request refused with 403 would be one
	})

	t.Run("health shows every readyz check", func(t *testing.T) {
		b := b.on(t)
		b.do(chromedp.Navigate(b.base + "/ui/#health"))
		b.waitFor("the checks", `document.querySelector("#h-checks [data-check=sandbox]")`)
		var checks []string
		b.eval(`[...document.querySelectorAll("#h-checks .check-row")].map(r => r.dataset.check + "=" + r.querySelector(".badge").textContent)`, &checks)
		for _, want := range []string{"sandbox=ok", "policy=ok", "quota=ok"} {
			if !strings.Contains(strings.Join(checks, " "), want) {
				t.Errorf("checks %v lack %s", checks, want)
			}
		}
		b.noProblems()
		b.screenshot("health")
	})

	t.Run("a non-admin token does not see the admin pages and the API refuses them anyway", func(t *testing.T) {
		b := b.on(t)
		b.signIn(executor, "playground")
		var visible []string
		b.eval(`[...document.querySelectorAll("#nav a")].filter(a => !a.hidden).map(a => a.dataset.page)`, &visible)
		if strings.Join(visible, ",") != "playground,health" {
			t.Fatalf("an executor sees pages %v, want [playground health]", visible)
		}
		b.do(chromedp.Navigate(b.base + "/ui/#quotas"))
		b.waitFor("the refusal page", `!document.getElementById("page-denied").hidden`)
		defer b.expectHTTP(http.StatusForbidden, "/v1/admin/")()
		var statuses []int
		b.eval(`Promise.all(["/v1/admin/tenants", "/v1/admin/audit", "/v1/admin/tenants/demo/usage"].map(p =>
			fetch(p, {headers: {Authorization: "Bearer " + sessionStorage.getItem("execgate.token")}}).then(r => r.status)))`, &statuses)
		for _, st := range statuses {
			if st != http.StatusForbidden {
				t.Fatalf("the API answered %v to an executor's token, want 403 each", statuses)
			}
		}
		b.screenshot("denied")
	})

	t.Run("signing out forgets the token and the previous results", func(t *testing.T) {
		b := b.on(t)
		b.do(chromedp.Navigate(b.base + "/ui/#playground"))
		b.run("def run(args, context):\n    return 1\n")
		b.do(chromedp.Click(chromedp.ID("signout")))
		b.waitFor("the sign-in page", `document.getElementById("page-signin") && !document.getElementById("page-signin").hidden`)
		var left bool
		b.eval(`!!sessionStorage.getItem("execgate.token") || !!document.querySelector("#pg-status")`, &left)
		if left {
			t.Fatal("the token or the last envelope survived signing out")
		}
	})
}

// tracesStatus is the HTTP status of GET /v1/admin/traces/{id} for tok:
// 200 when the gateway kept the trace's spans, 404 when it did not (or, on
// a gateway without the route, has no such route).
func (s *server) tracesStatus(t *testing.T, tok, traceID string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.app.URL()+"/v1/admin/traces/"+traceID, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// brokenRunner is a host that cannot create a jail.
type brokenRunner struct{}

func (brokenRunner) Run(context.Context, sandbox.Spec) (sandbox.Result, error) {
	return sandbox.Result{}, &sandbox.UnavailableError{
		Reason: "nsjail could not create the jail",
		Log:    []string{"mount('/', '/', MS_REC|MS_PRIVATE): Permission denied"},
		Hint:   "run privileged or with seccomp Unconfined",
	}
}

// "Healthy but broken" must be visible at a glance: the process answers,
// the policy and quota checks pass, and the sandbox row says why nothing
// can run.
func TestConsoleHealthShowsABrokenSandboxWithItsHint(t *testing.T) {
	s := start(t, setup{runner: brokenRunner{}})
	b := newBrowser(t, s.app.URL())
	defer b.expectHTTP(http.StatusServiceUnavailable, "/readyz")() // not ready: the page shows why
	b.signIn(s.token("demo", tenancy.RoleAuditor), "health")
	b.waitFor("the checks", `document.querySelector("#h-checks [data-check=sandbox]")`)
	if got := b.text(`document.querySelector("#h-summary .badge").textContent`); got != "not ready" {
		t.Fatalf("summary %q, want not ready", got)
	}
	row := b.text(`document.querySelector("#h-checks [data-check=sandbox]").textContent`)
	if !strings.Contains(row, "failing") || !strings.Contains(row, "seccomp Unconfined") {
		t.Fatalf("sandbox row %q: want failing with the hint", row)
	}
	if got := b.text(`document.querySelector("#h-checks [data-check=policy] .badge").textContent`); got != "ok" {
		t.Fatalf("policy check %q, want ok", got)
	}
	b.noProblems()
	b.screenshot("health-broken")
}
