// Command docgen writes the generated pages of the documentation site: the
// configuration reference (from the config structs and their doc comments)
// and the HTTP API reference (from gateway/openapi.yaml). Run it from the
// repository: go run ./cmd/docgen. The tests of internal/docgen fail when
// the checked-in pages differ from what it writes.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/execgate/execgate/internal/docgen"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
}

func run() error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := docgen.RepoRoot(wd)
	if err != nil {
		return err
	}
	pages, err := docgen.Generate(root)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(pages))
	for name := range pages {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(pages[name]), 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", name)
	}
	return nil
}
