package app_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/tenancy"
)

// The console's input files, stdin and artifacts (issue #24 items 3 and 6)
// in a real headless Chromium against a real gateway and nsjail: files
// chosen with the file picker reach the tool under /workspace, the
// artifacts it leaves in /workspace/out are listed, downloaded through GET
// /v1/executions/{id}/artifacts/{name} with the console's token and, for
// PNGs, drawn as <img> from a blob: URL; hostile names and SVG stay inert.

// artifactsTool reads its input files and stdin and leaves: a small PNG
// (inlined in the envelope), a PNG over the 64 KiB inline cap (so its
// preview comes from the route), a CSV, a hostile SVG, SVG bytes under a
// .png name, a text file named with markup, and a symbolic link (not
// collected). The PNGs are written with
// zlib and struct: valid images of a known size.
const artifactsTool = `import os, struct, sys, zlib

def png(w, h, level):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    rows = b"".join(b"\x00" + bytes(v for x in range(w) for v in (x * 255 // w, y * 255 // h, 160)) for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows, level)) + chunk(b"IEND", b""))

def run(args, context):
    rows = open("data/in.csv").read().splitlines()
    blob = open("blob.bin", "rb").read()
    stdin = sys.stdin.read()
    with open("out/chart.png", "wb") as f:
        f.write(png(37, 23, 9))
    with open("out/noise.png", "wb") as f:
        f.write(png(160, 140, 0))
    with open("out/report.csv", "w") as f:
        f.write("rows,blob,stdin\n%d,%s,%s\n" % (len(rows), blob.hex(), stdin.strip()))
    context.artifacts.save("evil.svg", '<svg xmlns="http://www.w3.org/2000/svg" onload="window.__pwned=1"><script>window.__pwned=2</script></svg>')
    context.artifacts.save("fake.png", '<svg xmlns="http://www.w3.org/2000/svg" onload="window.__pwned=3"/>')
    context.artifacts.save('<img src=x onerror="window.__pwned=4">.txt', "markup in the name")
    os.symlink("/etc/passwd", "out/passwd-link")
    return {"rows": len(rows), "stdin": stdin}
`

// markupName is the artifact named with markup.
const markupName = `<img src=x onerror="window.__pwned=4">.txt`

// pickFiles chooses files with the playground's file picker.
func (b *browser) pickFiles(paths ...string) {
	b.t.Helper()
	var before int
	b.eval(`document.querySelectorAll("#pg-files-table tbody tr").length`, &before)
	b.do(chromedp.SetUploadFiles(chromedp.ID("pg-files-input"), paths))
	b.waitFor("the picked files", fmt.Sprintf(`document.querySelectorAll("#pg-files-table tbody tr").length > %d`, before))
}

// pickedFiles is the picker's table: name, path, size, encoding per row.
func (b *browser) pickedFiles() [][]string {
	b.t.Helper()
	var rows [][]string
	b.eval(`[...document.querySelectorAll("#pg-files-table tbody tr")].map(tr => [tr.dataset.name, tr.querySelector("input.path").value,
		tr.children[1].textContent, tr.children[2].textContent])`, &rows)
	return rows
}

// artifactRows is an artifacts table: name, size, media type, sha256
// prefix and the download link's href per row.
func (b *browser) artifactRows(box string) [][]string {
	b.t.Helper()
	var rows [][]string
	b.eval(`[...document.querySelectorAll("#`+box+` table.artifacts tbody tr")].map(tr => [tr.children[0].textContent, tr.children[1].textContent,
		tr.children[2].textContent, tr.children[3].textContent, (tr.querySelector("a.download") || {getAttribute: () => ""}).getAttribute("href") || ""])`, &rows)
	return rows
}

// previews is each preview figure of box: name → the loaded image's
// "WxH blob" (natural size, and whether its src is a blob: URL), or the
// figure's text when it has no image.
func (b *browser) previews(box string) map[string]string {
	b.t.Helper()
	var got map[string]string
	b.eval(`Object.fromEntries([...document.querySelectorAll("#`+box+`-previews figure")].map(f => {
		const img = f.querySelector("img");
		return [f.dataset.name, img ? (img.complete && img.dataset.loaded ? img.naturalWidth + "x" + img.naturalHeight + (img.src.startsWith("blob:") ? " blob" : " " + img.src.slice(0, 10)) : "loading")
			: f.textContent];
	}))`, &got)
	return got
}

func TestConsoleInputFilesStdinAndArtifacts(t *testing.T) {
	s := start(t, setup{mutate: func(c *config.Config) {
		for i := range c.Tenants {
			if c.Tenants[i].ID == "demo" {
				c.Tenants[i].Policy["max_limits"] = map[string]any{"files": 2}
			}
		}
	}})
	b := newBrowser(t, s.app.URL())
	executor := s.token("demo", tenancy.RoleExecutor)
	b.signIn(executor, "playground")
	status := `document.querySelector("#pg-status .badge").textContent`
	out := `document.getElementById("pg-out").innerText`

	dir := t.TempDir()
	inCSV := "name,n\na,1\nb,2\n"
	blob := []byte{0xde, 0xad, 0xbe, 0xef, 0xff} // not UTF-8: sent as base64
	for name, data := range map[string][]byte{"in.csv": []byte(inCSV), "blob.bin": blob, "extra.txt": []byte("one too many")} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var runID string
	t.Run("files chosen with the picker and stdin reach the tool; its artifacts are listed, previewed and downloaded", func(t *testing.T) {
		b := b.on(t)
		b.pickFiles(filepath.Join(dir, "in.csv"), filepath.Join(dir, "blob.bin"))
		b.waitFor("both files", `document.querySelectorAll("#pg-files-table tbody tr").length === 2`)
		picked := b.pickedFiles()
		if want := fmt.Sprintf("[[in.csv in.csv %d B utf8] [blob.bin blob.bin 5 B base64]]", len(inCSV)); fmt.Sprint(picked) != want {
			t.Fatalf("picked files %v, want %s", picked, want)
		}
		// The path is the file's name, and can be edited.
		b.eval(`(() => { const el = document.querySelector('#pg-files-table tr[data-name="in.csv"] input.path'); el.value = "data/in.csv";
			el.dispatchEvent(new Event("input", {bubbles: true})); return true })()`, nil)
		b.setField("pg-stdin", "from the console\n")
		b.setField("pg-timeout", "20000")
		b.setField("pg-cpu", "20000")
		b.run(artifactsTool)
		if got := b.text(status); got != "ok" {
			t.Fatalf("status %q: %s", got, b.text(out))
		}
		if res := b.text(`document.getElementById("pg-result").innerText`); !strings.Contains(res, `"rows": 3`) || !strings.Contains(res, `"stdin": "from the console\n"`) {
			t.Fatalf("result %q: want the input file's 3 lines and the stdin", res)
		}
		runID = b.text(`document.getElementById("pg-execution-id").textContent`)
		env, _ := s.do(http.MethodGet, "/v1/executions/"+url.PathEscape(runID), executor, nil).json(t)["envelope"].(map[string]any)
		list, _ := env["artifacts"].([]any)
		if len(list) != 6 {
			t.Fatalf("the envelope lists %d artifacts: %v", len(list), env["artifacts"])
		}
		rows := b.artifactRows("pg-artifacts")
		if len(rows) != len(list) {
			t.Fatalf("the page lists %d artifacts, the envelope %d: %v", len(rows), len(list), rows)
		}
		for i, a := range list {
			m := a.(map[string]any)
			name, mime, sum := m["name"].(string), m["mime"].(string), m["sha256"].(string)
			r := rows[i]
			linked, err := url.PathUnescape(strings.TrimPrefix(r[4], "/v1/executions/"+runID+"/artifacts/"))
			if r[0] != name || !strings.HasPrefix(r[2], mime) || r[3] != sum[:12] || err != nil || linked != name || !strings.HasPrefix(r[4], "/v1/executions/"+runID+"/artifacts/") {
				t.Errorf("row %d %q: want %s, %s, %s…, its route", i, r, name, mime, sum[:12])
			}
		}
		if rows[0][0] != markupName {
			t.Errorf("the first artifact is shown as %q, want the markup as text %q", rows[0][0], markupName)
		}

		if dropped := b.text(`document.querySelector("#pg-artifacts details.dropped").textContent`); !strings.Contains(dropped, "1 file of /workspace/out was not collected") ||
			!strings.Contains(dropped, "passwd-link: a symbolic link") {
			t.Errorf("what was not collected: %q", dropped)
		}

		// The PNGs are drawn (the small one from the envelope's bytes, the
		// large one fetched through the route); SVG bytes under a .png name
		// are not; the SVG is a download only.
		b.waitFor("the previews", `document.querySelectorAll("#pg-artifacts-previews img[data-loaded]").length === 2 && document.querySelectorAll("#pg-artifacts-previews figure").length === 3`)
		prev := b.previews("pg-artifacts")
		if prev["chart.png"] != "37x23 blob" || prev["noise.png"] != "160x140 blob" || !strings.Contains(prev["fake.png"], "not previewed: the bytes are not image/png") || len(prev) != 3 {
			t.Fatalf("previews %v: want chart.png 37x23 and noise.png 160x140 from blob: URLs, fake.png refused, nothing else", prev)
		}
		var imgs int
		b.eval(`document.querySelectorAll("#pg-out img").length`, &imgs)
		if imgs != 2 {
			t.Fatalf("%d <img> in the output, want the 2 PNG previews", imgs)
		}

		// Nothing of the tool's markup ran or became an element.
		var injected bool
		b.eval(`!!(window.__pwned || document.querySelector('img[src="x"], svg script, #pg-out svg, #pg-out object, #pg-out iframe, #pg-out embed'))`, &injected)
		if injected {
			t.Fatal("an artifact's name or content became markup")
		}

		// The CSV link points at the route; that route, with the token,
		// answers the CSV; and clicking the link saves exactly those bytes.
		wantCSV := "rows,blob,stdin\n3,deadbeefff,from the console\n"
		href := b.text(`document.querySelector('#pg-artifacts a.download[data-name="report.csv"]').getAttribute("href")`)
		if g := s.do(http.MethodGet, href, executor, nil); g.status != http.StatusOK || string(g.body) != wantCSV || g.header.Get("Content-Type") != "text/csv" {
			t.Fatalf("GET %s: %d %q %q, want the CSV", href, g.status, g.header.Get("Content-Type"), g.body)
		}
		downloads := t.TempDir()
		if _, err := chromedp.Call(b.ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
			Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: downloads}); err != nil {
			t.Fatal(err)
		}
		b.do(chromedp.Click(chromedp.CSS(`#pg-artifacts a.download[data-name="report.csv"]`)))
		b.waitFor("the download", `document.querySelector('#pg-artifacts tr[data-name="report.csv"] .dl-status').textContent.startsWith("downloaded")`)
		saved := filepath.Join(downloads, "report.csv")
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := os.ReadFile(saved)
			if err == nil && string(got) == wantCSV {
				break
			}
			if time.Now().After(deadline) {
				entries, _ := os.ReadDir(downloads)
				t.Fatalf("the downloaded file: %q, %v (the directory holds %v); want the CSV", got, err, entries)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The markup-named artifact downloads by its route too.
		href = b.text(`[...document.querySelectorAll("#pg-artifacts a.download")][0].getAttribute("href")`)
		if g := s.do(http.MethodGet, href, executor, nil); g.status != http.StatusOK || string(g.body) != "markup in the name" {
			t.Fatalf("GET %s: %d %q", href, g.status, g.body)
		}
		b.noProblems()
		b.screenshot("playground-artifacts")
		// The files and artifacts tables scroll within their panes at a
		// phone's width; the page does not.
		b.do(chromedp.EmulateViewport(390, 844))
		b.screenshot("playground-artifacts-phone")
		var overflow bool
		b.eval(`document.documentElement.scrollWidth > window.innerWidth + 1`, &overflow)
		b.do(chromedp.EmulateViewport(1400, 1000))
		if overflow {
			t.Errorf("the playground with files and artifacts scrolls sideways at a phone width (390 px)")
		}
	})

	t.Run("a file more than the policy allows is refused naming it, the picker marks it, and nothing runs", func(t *testing.T) {
		b := b.on(t)
		defer b.expectHTTP(http.StatusRequestEntityTooLarge, "/v1/execut")()
		b.pickFiles(filepath.Join(dir, "extra.txt"))
		b.waitFor("three files", `document.querySelectorAll("#pg-files-table tbody tr").length === 3`)
		before := s.runs.Load()
		b.run("def run(args, context):\n    return 1\n")
		msg := b.text(`(document.querySelector("#pg-error .error") || {}).textContent || ""`)
		if got := b.text(status); !strings.HasPrefix(got, "error") || !strings.Contains(msg, `files[2] ("extra.txt")`) || !strings.Contains(msg, "limits.files") {
			t.Fatalf("status %q, message %q: want the refusal naming files[2] (extra.txt) and limits.files\n%s", got, msg, b.text(out))
		}
		var bad []string
		b.eval(`[...document.querySelectorAll("#pg-files-table tr.bad")].map(tr => tr.dataset.name + " " + tr.querySelector("input.path").getAttribute("aria-invalid"))`, &bad)
		if fmt.Sprint(bad) != "[extra.txt true]" {
			t.Fatalf("marked rows %v, want extra.txt", bad)
		}
		if n := s.runs.Load() - before; n != 0 {
			t.Fatalf("%d runs for a refused request", n)
		}
		// Removing it clears the refusal at the next run.
		b.do(chromedp.Click(chromedp.CSS(`#pg-files-table tr[data-name="extra.txt"] button`)))
		b.waitFor("two files", `document.querySelectorAll("#pg-files-table tbody tr").length === 2`)
		b.noProblems()
		b.screenshot("playground-files-refused")
	})

	t.Run("files over the body cap are refused before the body is read, and the page says what bounds them", func(t *testing.T) {
		b := b.on(t)
		defer b.expectHTTP(http.StatusRequestEntityTooLarge, "/v1/execut")()
		big := filepath.Join(dir, "big.txt")
		if err := os.WriteFile(big, []byte(strings.Repeat("x", 3<<20)), 0o644); err != nil {
			t.Fatal(err)
		}
		b.pickFiles(big)
		b.waitFor("three files", `document.querySelectorAll("#pg-files-table tbody tr").length === 3`)
		if sum := b.text(`document.getElementById("pg-files-sum").textContent`); sum != "3 files, 3.0 MiB" {
			t.Fatalf("files summary %q", sum)
		}
		before := s.runs.Load()
		b.run("def run(args, context):\n    return 1\n")
		msg := b.text(`(document.querySelector("#pg-error .error") || {}).textContent || ""`)
		hint := b.text(`(document.getElementById("pg-body-hint") || {}).textContent || ""`)
		if !strings.Contains(msg, "bytes declared, over the 1048576-byte cap") || !strings.Contains(hint, "server.max_body_bytes") {
			t.Fatalf("message %q, hint %q: want the body cap and what bounds the files\n%s", msg, hint, b.text(out))
		}
		if n := s.runs.Load() - before; n != 0 {
			t.Fatalf("%d runs for a refused request", n)
		}
		b.do(chromedp.Click(chromedp.CSS(`#pg-files-table tr[data-name="big.txt"] button`)))
		b.waitFor("two files", `document.querySelectorAll("#pg-files-table tbody tr").length === 2`)

		// Past the platform's maximum (64 MiB in all) the page does not
		// even read the file (a sparse one: its size is all it has).
		huge := filepath.Join(dir, "huge.bin")
		f, err := os.Create(huge)
		if err != nil {
			t.Fatal(err)
		}
		err = f.Truncate(65 << 20)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		b.do(chromedp.SetUploadFiles(chromedp.ID("pg-files-input"), []string{huge}))
		b.waitFor("the refusal", `document.getElementById("pg-form-error").textContent.includes("huge.bin")`)
		if msg := b.text(`document.getElementById("pg-form-error").textContent`); !strings.Contains(msg, `"huge.bin" (65.0 MiB) was not added`) || !strings.Contains(msg, "64.0 MiB in all") {
			t.Fatalf("form error %q", msg)
		}
		if rows := b.pickedFiles(); len(rows) != 2 {
			t.Fatalf("picked files %v after a refused one", rows)
		}
		b.noProblems()
	})

	t.Run("the run's page lists its input files and artifacts, previews the PNGs through the route and downloads", func(t *testing.T) {
		b := b.on(t)
		if runID == "" {
			t.Skip("the playground run failed")
		}
		for _, who := range []struct {
			name, tenant string
		}{{"an admin of the tenant", "demo"}, {"an admin of another tenant", "acme"}} {
			b.signIn(s.token(who.tenant, tenancy.RoleAdmin), "runs")
			b.openRun(runID)
			b.waitFor("the previews", `document.querySelectorAll("#r-artifacts-previews img[data-loaded]").length === 2 && document.querySelectorAll("#r-artifacts-previews figure").length === 3`)
			prev := b.previews("r-artifacts")
			if prev["chart.png"] != "37x23 blob" || prev["noise.png"] != "160x140 blob" || len(prev) != 3 {
				t.Fatalf("%s: previews %v", who.name, prev)
			}
			rows := b.artifactRows("r-artifacts")
			query := ""
			if who.tenant != "demo" {
				query = "?tenant=demo"
			}
			if len(rows) != 6 || rows[0][0] != markupName || rows[5][0] != "report.csv" || rows[5][4] != "/v1/executions/"+runID+"/artifacts/report.csv"+query {
				t.Fatalf("%s: artifact rows %q", who.name, rows)
			}
			if g := s.do(http.MethodGet, rows[5][4], s.token(who.tenant, tenancy.RoleAdmin), nil); g.status != http.StatusOK || !strings.HasPrefix(string(g.body), "rows,blob,stdin") {
				t.Fatalf("%s: GET %s: %d %s", who.name, rows[5][4], g.status, g.body)
			}
			var files []string
			b.eval(`[...document.querySelectorAll("#r-files tbody tr")].map(tr => tr.children[0].textContent + " " + tr.children[1].textContent + " " + tr.children[2].textContent)`, &files)
			inSum := sha256.Sum256([]byte(inCSV))
			blobSum := sha256.Sum256(blob)
			if fmt.Sprint(files) != fmt.Sprintf("[data/in.csv %d B %s blob.bin 5 B %s]", len(inCSV), hex.EncodeToString(inSum[:])[:12], hex.EncodeToString(blobSum[:])[:12]) {
				t.Fatalf("%s: input files %v", who.name, files)
			}
			var injected bool
			b.eval(`!!(window.__pwned || document.querySelector('img[src="x"], #r-detail svg script'))`, &injected)
			if injected {
				t.Fatal("an artifact's name became markup")
			}
			b.noProblems()
		}
		b.screenshot("runs-artifacts")
	})

	t.Run("a tenant-admin sees the list but is offered no download the API would refuse", func(t *testing.T) {
		b := b.on(t)
		if runID == "" {
			t.Skip("the playground run failed")
		}
		b.signIn(s.token("demo", tenancy.RoleTenantAdmin), "runs")
		b.openRun(runID)
		b.waitFor("the artifacts", `document.querySelector("#r-artifacts table.artifacts")`)
		var links, figures int
		b.eval(`document.querySelectorAll("#r-artifacts a.download").length`, &links)
		b.eval(`document.querySelectorAll("#r-artifacts-previews figure").length`, &figures)
		note := b.text(`(document.querySelector("#r-artifacts .access-note") || {}).textContent || ""`)
		if links != 0 || figures != 0 || !strings.Contains(note, "admin tokens and executor tokens of tenant demo") {
			t.Fatalf("%d links, %d previews, note %q: want none, none, and why", links, figures, note)
		}
		if r := s.fetchArtifact(t, s.token("demo", tenancy.RoleTenantAdmin), runID, "report.csv", ""); r.status != http.StatusForbidden {
			t.Fatalf("the API answered a tenant-admin %d, want 403 (the page must not offer what it refuses)", r.status)
		}
		b.noProblems() // a request refused with 403 would be one
	})
}
