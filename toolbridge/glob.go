package toolbridge

import (
	"path"
	"strings"
)

// matchGlob matches a tool glob against a name: '.' separates segments,
// `*` and `?` never cross one (as OPA's glob.match with ["."]).
func matchGlob(pattern, name string) bool {
	if strings.Contains(name, "/") {
		return false
	}
	ok, err := path.Match(strings.ReplaceAll(pattern, ".", "/"), strings.ReplaceAll(name, ".", "/"))
	return err == nil && ok
}

// splitTool splits "<server>.<tool>".
func splitTool(full string) (server, name string, ok bool) {
	server, name, ok = strings.Cut(full, ".")
	return server, name, ok && server != "" && name != ""
}
