package bench

import (
	"slices"
	"strings"
	"testing"
)

func TestSubsetDefaultsToAllAndNamesAnUnknownOne(t *testing.T) {
	got, err := subset("language", nil, AllLanguages)
	if err != nil || !slices.Equal(got, AllLanguages) {
		t.Fatalf("empty: got %v, %v; want all %v", got, err, AllLanguages)
	}
	got, err = subset("language", []string{"python"}, AllLanguages)
	if err != nil || !slices.Equal(got, []string{"python"}) {
		t.Fatalf("python: got %v, %v", got, err)
	}
	if _, err := subset("language", []string{"python", "ruby"}, AllLanguages); err == nil || !strings.Contains(err.Error(), `unknown language "ruby"`) {
		t.Fatalf("ruby: got %v, want an error naming it", err)
	}
}

func TestCommandNamesTheLanguagesWhenNotAll(t *testing.T) {
	o := Options{Languages: []string{"python"}}
	if c := o.Command(); !strings.Contains(c, "--languages python") {
		t.Fatalf("command %q does not name --languages python", c)
	}
	o.Languages = AllLanguages
	if c := o.Command(); strings.Contains(c, "--languages") {
		t.Fatalf("command %q names the default languages", c)
	}
}
