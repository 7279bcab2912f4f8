package rootfs

import (
	"debug/elf"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLinkTargetStaysInsideTheTree(t *testing.T) {
	for _, tc := range []struct{ link, target, want string }{
		{"/lib", "usr/lib", "/usr/lib"},
		{"/usr/lib64/ld.so", "/lib/x86_64-linux-gnu/ld.so", "/lib/x86_64-linux-gnu/ld.so"},
		{"/usr/lib/x/libz.so.1", "libz.so.1.2.13", "/usr/lib/x/libz.so.1.2.13"},
		{"/a", "../../../etc/shadow", "/etc/shadow"},
		{"/usr/bin/python3", "./python3.11", "/usr/bin/python3.11"},
	} {
		t.Run(tc.link+" -> "+tc.target, func(t *testing.T) {
			if got := linkTarget(tc.link, tc.target); got != tc.want {
				t.Errorf("linkTarget = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEscapesFlagsLinksLeavingTheTree(t *testing.T) {
	for _, tc := range []struct {
		link, target string
		want         bool
	}{
		{"/lib", "usr/lib", false},
		{"/usr/lib64/ld.so", "../../lib/x86_64-linux-gnu/ld.so", false},
		{"/usr/lib64/ld.so", "../../../lib/ld.so", true},
		{"/etc/x", "/etc/shadow", true},
		{"/a", "..", true},
		{"/a/b", "c/../../d", false},
	} {
		t.Run(tc.link+" -> "+tc.target, func(t *testing.T) {
			if got := escapes(tc.link, tc.target); got != tc.want {
				t.Errorf("escapes = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReadLdConfFollowsIncludes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("ld.so.conf", "include ld.so.conf.d/*.conf\n/opt/first # trailing comment\n")
	write("ld.so.conf.d/a.conf", "# libc default configuration\n/usr/local/lib\n")
	write("ld.so.conf.d/b.conf", "/lib/x86_64-linux-gnu\nhwcap 0 nosegneg\n\n")
	got := readLdConf(dir, "/ld.so.conf", 0)
	want := []string{"/usr/local/lib", "/lib/x86_64-linux-gnu", "/opt/first"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("readLdConf = %q, want %q", got, want)
	}
	if got := readLdConf(dir, "/missing.conf", 0); got != nil {
		t.Errorf("missing file gave %q", got)
	}
}

func TestLibraryClosureOfTheHostInterpreter(t *testing.T) {
	py, err := filepath.EvalSymlinks(DefaultPython)
	if err != nil {
		t.Skipf("no %s: %v", DefaultPython, err)
	}
	r := newLibResolver("/")
	libs, err := r.closure([]string{py})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range libs {
		names = append(names, filepath.Base(l))
	}
	joined := strings.Join(names, " ")
	for _, want := range []string{"libc.so.6", "ld-linux-x86-64.so.2"} {
		if !strings.Contains(joined, want) {
			t.Errorf("closure of %s = %v lacks %s", py, names, want)
		}
	}
	d, err := readELF(py, py)
	if err != nil {
		t.Fatal(err)
	}
	if d.class != elf.ELFCLASS64 || d.interp == "" {
		t.Errorf("readELF(%s) = class %v interp %q", py, d.class, d.interp)
	}
	if _, err := r.resolve("libdoes-not-exist.so.9", d); err == nil || !strings.Contains(err.Error(), "libdoes-not-exist.so.9") {
		t.Errorf("resolving a missing library: err = %v, want one naming it", err)
	}
}

func TestParseCABundleCountsOnlyCertificates(t *testing.T) {
	host, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Skipf("no host CA bundle: %v", err)
	}
	clean, n := parseCABundle(host)
	if n == 0 {
		t.Fatal("host bundle parsed to 0 certificates")
	}
	if _, again := parseCABundle(clean); again != n {
		t.Errorf("re-parsing the cleaned bundle gave %d, want %d", again, n)
	}
	key := "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
	if _, got := parseCABundle([]byte(key + "garbage\n")); got != 0 {
		t.Errorf("a key and garbage counted as %d certificates", got)
	}
	mixed, got := parseCABundle(append([]byte("# comment\n"+key), host...))
	if got != n || strings.Contains(string(mixed), "PRIVATE KEY") || strings.Contains(string(mixed), "# comment") {
		t.Errorf("mixed bundle: %d certificates (want %d), key or comment kept", got, n)
	}
}
