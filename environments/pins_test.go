package environments

import (
	"strings"
	"testing"
)

func TestNormalizeRequirements(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want string // normalised pins joined by " ", or the error's substring
		ok   bool
	}{
		{"pins are normalised and sorted", []string{"Six==1.16.0", "  attrs == 23.1.0 "}, "attrs==23.1.0 six==1.16.0", true},
		{"names follow PEP 503", []string{"Zope.Interface==6.0", "typing_extensions==4.8.0"}, "typing-extensions==4.8.0 zope-interface==6.0", true},
		{"extras are kept, normalised and sorted", []string{"requests[Socks, security]==2.31.0"}, "requests[security,socks]==2.31.0", true},
		{"local and epoch versions are pins too", []string{"torch==2.1.0+cpu", "x==1!2.0"}, "torch==2.1.0+cpu x==1!2.0", true},
		{"a range is not a pin", []string{"six>=1"}, `requirements[0]: "six>=1" is not pinned with ==`, false},
		{"a wildcard is not a pin", []string{"six==1.*"}, "is not pinned", false},
		{"arbitrary equality is not a pin", []string{"six===1.16.0"}, "is not pinned", false},
		{"a bare name is not a pin", []string{"six"}, "is not pinned", false},
		{"options are refused", []string{"six==1.16.0", "--index-url=http://evil"}, `requirements[1]: "--index-url=http://evil" is an installer option`, false},
		{"URLs are refused", []string{"six @ https://example.com/six.whl"}, "is a URL", false},
		{"paths are refused", []string{"./six-1.16.0-py2.py3-none-any.whl"}, "is a path", false},
		{"markers are refused", []string{`six==1.16.0; python_version > "3"`}, "environment marker", false},
		{"an empty entry is refused", []string{""}, "is empty", false},
		{"a name twice is refused", []string{"six==1.16.0", "Six==1.15.0"}, "names six again", false},
		{"too many entries are refused", make([]string, maxRequirements+1), "at most", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := normalizeRequirements(tt.in)
			if tt.ok {
				if err != nil || strings.Join(got, " ") != tt.want {
					t.Fatalf("got %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %q, %v; want an error containing %q", got, err, tt.want)
			}
		})
	}
}

func TestDepsKeyIsStableAndSpecific(t *testing.T) {
	a := depsKey("3.11.2", []string{"attrs==23.1.0", "six==1.16.0"})
	if a != depsKey("3.11.2", []string{"attrs==23.1.0", "six==1.16.0"}) || len(a) != 64 {
		t.Fatalf("key %q is not a stable sha256", a)
	}
	for name, other := range map[string]string{
		"another interpreter":  depsKey("3.12.0", []string{"attrs==23.1.0", "six==1.16.0"}),
		"another version":      depsKey("3.11.2", []string{"attrs==23.1.0", "six==1.15.0"}),
		"a subset":             depsKey("3.11.2", []string{"six==1.16.0"}),
		"entries run together": depsKey("3.11.2", []string{"attrs==23.1.0six==1.16.0"}),
	} {
		if other == a {
			t.Errorf("%s has the same key", name)
		}
	}
}
