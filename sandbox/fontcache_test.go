package sandbox_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/execgate/execgate/sandbox"
)

// The build run's result is trusted only in matplotlib's shape: one to
// four font lists, each a FontManager in JSON of bounded size, under the
// names matplotlib gives them.
func TestFontCacheFilesKeepsOnlyMatplotlibsFontLists(t *testing.T) {
	list := `{"_version": "3.11.0", "__class__": "FontManager", "ttflist": []}`
	obj := func(m map[string]string) json.RawMessage {
		b, _ := json.Marshal(m)
		return b
	}
	got, err := sandbox.FontCacheFiles(obj(map[string]string{"fontlist-v390.json": list}))
	if err != nil || len(got) != 1 || string(got["fontlist-v390.json"]) != list {
		t.Fatalf("a good list: %v %q", err, got)
	}
	for name, res := range map[string]json.RawMessage{
		"not an object":        json.RawMessage(`["fontlist-v390.json"]`),
		"no file":              obj(map[string]string{}),
		"five files":           obj(map[string]string{"fontlist-v1.json": list, "fontlist-v2.json": list, "fontlist-v3.json": list, "fontlist-v4.json": list, "fontlist-v5.json": list}),
		"a path":               obj(map[string]string{"../fontlist-v390.json": list}),
		"another name":         obj(map[string]string{"matplotlibrc": list}),
		"a hidden suffix":      obj(map[string]string{"fontlist-v390.json.py": list}),
		"not JSON":             obj(map[string]string{"fontlist-v390.json": "{"}),
		"not a FontManager":    obj(map[string]string{"fontlist-v390.json": `{"__class__": "FontEntry"}`}),
		"a list of its own":    obj(map[string]string{"fontlist-v390.json": `[{"__class__": "FontManager"}]`}),
		"more than a mebibyte": obj(map[string]string{"fontlist-v390.json": `{"__class__": "FontManager", "pad": "` + strings.Repeat("x", 1<<20) + `"}`}),
		"one bad of two":       obj(map[string]string{"fontlist-v390.json": list, "x.json": list}),
	} {
		if got, err := sandbox.FontCacheFiles(res); err == nil {
			t.Errorf("%s: accepted %d files", name, len(got))
		}
	}
}
