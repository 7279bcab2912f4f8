package app_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
)

// Issue #24 item 3: images are a first-class result. A matplotlib figure a
// tool saves comes back as an image/png artifact (real matplotlib from
// PyPI, through the deps path and the real gateway and nsjail), and
// execute_python / execute_javascript over /mcp return image artifacts as
// MCP image content (a real MCP client session).

// matplotlibRequirement is pinned so that the set it pulls in from PyPI
// stays what matplotlibPackages, the tenant's allow-list, names (a new
// dependency of a dependency upstream fails the test naming the chain).
const matplotlibRequirement = "matplotlib==3.11.2"

// matplotlibPackages is what matplotlibRequirement pulls in.
var matplotlibPackages = []any{"matplotlib", "contourpy", "cycler", "fonttools", "kiwisolver", "numpy",
	"packaging", "pillow", "pyparsing", "python-dateutil", "six", "tzdata"}

// chartTool draws a 4x3 inch figure at 50 dpi (200x150 pixels) twice:
// saved by path into /workspace/out, and through context.artifacts.save
// from memory. It reports the backend and where matplotlib keeps its
// cache, the font lists in that cache before matplotlib was imported (the
// environment's, copied by the harness: sandbox.FontCacheDir), and what
// matplotlib's font manager logged ("generated new fontManager" when it
// scanned the fonts itself).
const chartTool = `import glob, io, logging, os
font_cache = sorted(os.path.basename(p) for p in glob.glob("/tmp/matplotlib/fontlist-v*.json"))
font_log = []

class Catch(logging.Handler):
    def emit(self, record):
        font_log.append(record.getMessage())

logging.getLogger("matplotlib.font_manager").addHandler(Catch())
logging.getLogger("matplotlib.font_manager").setLevel(logging.INFO)
import matplotlib
import matplotlib.pyplot as plt

def run(args, context):
    fig, ax = plt.subplots(figsize=(4, 3), dpi=50)
    ax.plot([0, 1, 2, 3], [0, 1, 4, 9], color="red", linewidth=4)
    fig.savefig("/workspace/out/chart.png")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    context.artifacts.save("again.png", buf.getvalue())
    return {"backend": matplotlib.get_backend(), "cachedir": matplotlib.get_cachedir(),
            "env": os.environ.get("MPLBACKEND"), "font_cache": font_cache, "font_log": font_log}
`

// wantBuiltFontCache checks a chartTool result: matplotlib found the
// environment's font list in its cache and did not scan the fonts.
func wantBuiltFontCache(t *testing.T, res map[string]any) {
	t.Helper()
	fc, _ := res["font_cache"].([]any)
	if len(fc) != 1 || !regexp.MustCompile(`^fontlist-v[0-9.]+\.json$`).MatchString(fmt.Sprint(fc[0])) {
		t.Errorf("font lists in /tmp/matplotlib before matplotlib was imported: %v; want the environment's one", res["font_cache"])
	}
	if log := fmt.Sprint(res["font_log"]); strings.Contains(log, "generated new fontManager") {
		t.Errorf("matplotlib scanned the fonts itself (its log: %s): the environment's font list was not used", log)
	}
}

// wantPNG decodes data as a PNG of w x h pixels holding some pure-ish red
// (the plotted line): a real figure, not an empty canvas.
func wantPNG(t *testing.T, what string, data []byte, w, h int) {
	t.Helper()
	if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("%s: not a PNG: % x", what, data[:min(len(data), 16)])
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: decoding: %v", what, err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Fatalf("%s: %dx%d, want %dx%d", what, b.Dx(), b.Dy(), w, h)
	}
	if !hasRed(img) {
		t.Fatalf("%s: no red pixel: the figure's line is missing", what)
	}
}

func hasRed(img image.Image) bool {
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
			if c.R > 200 && c.G < 60 && c.B < 60 {
				return true
			}
		}
	}
	return false
}

// The figure is drawn on every Python runtime: each runtime's tree is
// built from its pinned Debian packages, which must hold the system
// libraries the wheels link (libstdc++ for kiwisolver and contourpy,
// libgcc_s, libm); python3.13 installs the cp313 wheels.
func TestAMatplotlibFigureComesBackAsAPNGArtifact(t *testing.T) {
	uv := testenv.UV(t)
	runtimes := testenv.RuntimesDir(t) // python3.11 and python3.13, built once per machine
	s := start(t, setup{realSandbox: true, mutate: func(c *config.Config) {
		c.Sandbox.UVPath = uv
		c.Sandbox.DepsDir = filepath.Join(testenv.JailDir(t), "deps") // the index is PyPI
		c.Sandbox.RuntimesDir = runtimes
		c.Sandbox.Runtimes = []string{"python3.11", "python3.13"}
		for i := range c.Tenants {
			c.Tenants[i].Policy["packages"] = map[string]any{"allow": matplotlibPackages, "deny": []any{}}
			c.Tenants[i].Policy["runtimes"] = []any{"python3.11", "python3.13"}
		}
	}})
	tok := s.token("demo")
	lim := stretchedLimits()
	lim["memory_mb"] = 512
	for _, rt := range []string{"python3.11", "python3.13"} {
		t.Run(rt, func(t *testing.T) {
			id := "chart-" + rt
			body := map[string]any{"execution_id": id, "source": chartTool, "requirements": []string{matplotlibRequirement}, "limits": lim, "runtime": rt}
			r := s.execute(tok, body)
			env := r.json(t)
			if r.status != http.StatusOK || env["status"] != "ok" {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if u, _ := env["usage"].(map[string]any); u["runtime"] != rt {
				t.Fatalf("ran on %v, want %s", u["runtime"], rt)
			}
			res, _ := env["result"].(map[string]any)
			if !strings.EqualFold(fmt.Sprint(res["backend"]), "agg") || res["env"] != "Agg" || res["cachedir"] != "/tmp/matplotlib" {
				t.Errorf("matplotlib ran with %v; want the Agg backend from MPLBACKEND and its cache in the run's /tmp", res)
			}
			wantBuiltFontCache(t, res)
			arts, _ := env["artifacts"].([]any)
			if len(arts) != 2 {
				t.Fatalf("artifacts %v, want again.png and chart.png", arts)
			}
			for _, a := range arts {
				m := a.(map[string]any)
				name := m["name"].(string)
				if m["mime"] != "image/png" {
					t.Errorf("%s: mime %v", name, m["mime"])
				}
				inline, err := base64.StdEncoding.DecodeString(fmt.Sprint(m["base64"]))
				if err != nil {
					t.Fatalf("%s: base64: %v", name, err)
				}
				wantPNG(t, name+" (inline)", inline, 200, 150)
				g := s.fetchArtifact(t, tok, id, name, "")
				if g.status != http.StatusOK || g.header.Get("Content-Type") != "image/png" || !bytes.Equal(g.body, inline) {
					t.Fatalf("GET %s: %d %q, %d bytes", name, g.status, g.header.Get("Content-Type"), len(g.body))
				}
			}
		})
	}

	t.Run("execute_python over /mcp returns the figure as image content", func(t *testing.T) {
		sess := mcpSession(t, s, tok)
		res, env := callTool(t, sess, "execute_python", map[string]any{"source": chartTool, "requirements": []any{matplotlibRequirement}, "limits": lim})
		if res.IsError || env["status"] != "ok" {
			t.Fatalf("isError=%v %v", res.IsError, env)
		}
		r, _ := env["result"].(map[string]any)
		wantBuiltFontCache(t, r)
		imgs := imageContents(res)
		if len(imgs) != 2 {
			t.Fatalf("%d image contents, want 2: %s", len(imgs), toolText(res))
		}
		for _, img := range imgs {
			if img.MIMEType != "image/png" {
				t.Errorf("image content of type %s", img.MIMEType)
			}
			wantPNG(t, "image content", img.Data, 200, 150)
		}
		if text := toolText(res); !strings.Contains(text, "chart.png (") || !strings.Contains(text, "shown as an image") {
			t.Errorf("the text does not name the artifacts:\n%s", text)
		}
	})
}

func imageContents(res *mcp.CallToolResult) []*mcp.ImageContent {
	var out []*mcp.ImageContent
	for _, c := range res.Content {
		if img, ok := c.(*mcp.ImageContent); ok {
			out = append(out, img)
		}
	}
	return out
}

// dotPNG is a w x h PNG, all red.
func dotPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := 0; i < len(img.Pix); i += 4 {
		copy(img.Pix[i:], []byte{255, 0, 0, 255})
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Without packages: both languages, both levels. The image comes in the
// tool's args (base64), so the test knows its bytes.
func TestMCPExecuteReturnsImageArtifactsAsImageContent(t *testing.T) {
	s := start(t, setup{mutate: func(c *config.Config) {
		c.Server.ArtifactsInlineBytes = 4096
		fast := config.DemoTenant()
		fast.ID = "fast"
		fast.Policy["isolation"] = []any{"jail", "process"}
		c.Tenants = append(c.Tenants, fast)
	}})
	sess := mcpSession(t, s, s.token("fast"))
	small, large := dotPNG(t, 3, 2), make([]byte, 8192)
	copy(large, "\x89PNG\r\n\x1a\n") // over the 4096-byte inline cap
	args := map[string]any{"small": base64.StdEncoding.EncodeToString(small), "large": base64.StdEncoding.EncodeToString(large)}
	py := `import base64, os
def run(args, context):
    context.artifacts.save("dot.png", base64.b64decode(args["small"]))
    with open("out/big.png", "wb") as f:
        f.write(base64.b64decode(args["large"]))
    context.artifacts.save("fake.png", "not a png")
    with open("out/rows.csv", "w") as f:
        f.write(open("in/data.csv").read() + input())
    return [os.environ.get("MPLBACKEND"), os.environ.get("MPLCONFIGDIR")]
`
	js := `export function run(args, context) {
  const b = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  context.artifacts.save("dot.png", b(args.small));
  Deno.writeFileSync("/workspace/out/big.png", b(args.large));
  context.artifacts.save("fake.png", "not a png");
  Deno.writeTextFileSync("/workspace/out/rows.csv", Deno.readTextFileSync("in/data.csv"));
  return null;
}
`
	files := []any{map[string]any{"path": "in/data.csv", "content": "a,b\n"}}
	for _, tc := range []struct{ tool, source, level string }{
		{"execute_python", py, "jail"},
		{"execute_python", py, "process"},
		{"execute_javascript", js, "jail"},
	} {
		t.Run(tc.tool+" at level "+tc.level, func(t *testing.T) {
			res, env := callTool(t, sess, tc.tool, map[string]any{"source": tc.source, "args": args, "isolation": tc.level,
				"files": files, "stdin": "1,2\n", "limits": stretchedLimits()})
			if res.IsError || env["status"] != "ok" {
				t.Fatalf("isError=%v %v", res.IsError, env)
			}
			if u, _ := env["usage"].(map[string]any); u["isolation"] != tc.level {
				t.Fatalf("ran at %v", u["isolation"])
			}
			if tc.tool == "execute_python" && fmt.Sprint(env["result"]) != "[Agg /tmp/matplotlib]" {
				t.Errorf("the jail's environment for matplotlib: %v", env["result"])
			}
			imgs := imageContents(res)
			if len(imgs) != 1 || imgs[0].MIMEType != "image/png" || !bytes.Equal(imgs[0].Data, small) {
				t.Fatalf("image contents %v, want dot.png alone:\n%s", imgs, toolText(res))
			}
			text := toolText(res)
			for _, want := range []string{
				"artifacts (4; each: GET /v1/executions/",
				"big.png (8192 bytes, image/png): too large to carry inline",
				"dot.png (" + fmt.Sprint(len(small)) + " bytes, image/png): shown as an image",
				"fake.png (9 bytes, image/png): its bytes are not a PNG image: not shown",
				"rows.csv (",
			} {
				if !strings.Contains(text, want) {
					t.Errorf("text lacks %q:\n%s", want, text)
				}
			}
			id := fmt.Sprint(env["execution_id"])
			if g := s.fetchArtifact(t, s.token("fast"), id, "rows.csv", ""); g.status != http.StatusOK || !strings.HasPrefix(string(g.body), "a,b\n") {
				t.Errorf("GET rows.csv: %d %q", g.status, g.body)
			}
		})
	}
}
