package sandbox

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
)

// matplotlib's font cache, built once per package environment.
//
// matplotlib scans every font it can find and writes the list
// (fontlist-v<version>.json) to its cache directory the first time a
// process imports matplotlib.font_manager (pyplot does): 0.30–0.38 s of
// every run that draws, since each run's /tmp, where MPLCONFIGDIR points,
// starts empty. The list depends only on the environment (matplotlib's own
// fonts, by paths relative to its data directory) and the runtime's tree,
// so the runner builds it once per environment: the first run of an
// environment holding matplotlib is preceded by a build run, a jail of
// execgate's own (network none, no tenant code, no arguments) that imports
// matplotlib.font_manager with the environment bound and returns the files
// matplotlib wrote. The runner checks them (FontCacheFiles) and keeps them
// in the environment's directory under FontCacheDir, read-only in every
// jail that binds it; the harness copies them into the run's
// MPLCONFIGDIR before the tool starts, and matplotlib reads the list
// instead of building it. What a tool writes still never outlives its run:
// the files come from the build run alone, and a run gets a copy.

// FontCacheDir is where an environment's font cache is kept, relative to
// the environment's directory (below sandbox.deps_dir; at
// jaillayout.DepsDir + "/" + FontCacheDir in a jail). A dot directory: no
// module can be imported from it.
const FontCacheDir = ".execgate/matplotlib"

// fontCacheMarker is the file whose presence says matplotlib is in an
// environment (it is a top-level package of the environment's directory).
const fontCacheMarker = "matplotlib/font_manager.py"

// fontCacheMaxBytes bounds each file the build may return (matplotlib's
// list for its own fonts is about 30 KiB).
const fontCacheMaxBytes = 1 << 20

// fontCacheNameRE is the name of a file matplotlib's font manager writes.
var fontCacheNameRE = regexp.MustCompile(`^fontlist-v[0-9][0-9.]{0,15}\.json$`)

// fontCacheBuild is the build run's tool: it makes matplotlib build its
// font list in the run's MPLCONFIGDIR and returns each file it wrote,
// name → text.
const fontCacheBuild = `import os
import matplotlib.font_manager

def run(args, context):
    d = os.environ["MPLCONFIGDIR"]
    return {n: open(os.path.join(d, n), encoding="utf-8").read()
            for n in sorted(os.listdir(d)) if n.startswith("fontlist-")}
`

// FontCacheFiles checks the build run's result: a JSON object of one to
// four files, each named as matplotlib names its font list, holding at
// most fontCacheMaxBytes of JSON whose top level is a FontManager (what
// matplotlib's json_load reads back); anything else is refused whole.
func FontCacheFiles(result json.RawMessage) (map[string][]byte, error) {
	var files map[string]string
	if err := json.Unmarshal(result, &files); err != nil {
		return nil, fmt.Errorf("the build's result is not an object of file texts: %w", err)
	}
	if len(files) == 0 || len(files) > 4 {
		return nil, fmt.Errorf("the build returned %d files, want 1 to 4", len(files))
	}
	out := make(map[string][]byte, len(files))
	for _, name := range slices.Sorted(maps.Keys(files)) {
		text := files[name]
		if !fontCacheNameRE.MatchString(name) {
			return nil, fmt.Errorf("the build returned a file named %q, not fontlist-v<version>.json", clipName(name))
		}
		if len(text) > fontCacheMaxBytes {
			return nil, fmt.Errorf("%s: %d bytes, more than %d", name, len(text), fontCacheMaxBytes)
		}
		var top struct {
			Class string `json:"__class__"`
		}
		if err := json.Unmarshal([]byte(text), &top); err != nil || top.Class != "FontManager" {
			return nil, fmt.Errorf("%s: not a matplotlib font list (a JSON object of __class__ FontManager)", name)
		}
		out[name] = []byte(text)
	}
	return out, nil
}

// clipName bounds a name a build returned before it is put in an error.
func clipName(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
