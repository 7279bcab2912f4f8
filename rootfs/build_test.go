package rootfs

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/sandbox/harness"
)

// built is one rootfs shared by the read-only layout tests of this package
// (a build takes a few seconds; the tests only inspect it).
var built struct {
	once sync.Once
	dir  string
	m    *Manifest
	log  string
	err  error
}

func buildOnce(t *testing.T) (string, *Manifest) {
	t.Helper()
	if _, err := os.Stat(DefaultPython); err != nil {
		t.Skipf("host interpreter %s missing: %v", DefaultPython, err)
	}
	built.once.Do(func() {
		parent, err := os.MkdirTemp("", "rootfs-test-")
		if err != nil {
			built.err = err
			return
		}
		built.dir = filepath.Join(parent, "rootfs")
		var log bytes.Buffer
		built.m, built.err = Build(context.Background(), Options{Dir: built.dir, Progress: &log})
		built.log = log.String()
	})
	if built.err != nil {
		t.Fatalf("Build: %v\n%s", built.err, built.log)
	}
	return built.dir, built.m
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(filepath.Dir(built.dir))
	}
	os.Exit(code)
}

func TestBuildWritesTheManifest(t *testing.T) {
	dir, m := buildOnce(t)
	read, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*read, *m) {
		t.Errorf("ReadManifest = %+v, Build returned %+v", read, m)
	}
	checks := []struct {
		name string
		ok   bool
	}{
		{"format is 1", m.Format == jaillayout.ManifestFormat},
		{"layout is this binary's", m.Layout == jaillayout.Version},
		{"protocol is the sandbox's", m.ProtocolVersion == jaillayout.ProtocolVersion},
		{"harness hash is the embedded harness's", m.HarnessSHA256 == harness.Hash()},
		{"python version is 3.x.y", strings.HasPrefix(m.PythonVersion, "3.") && strings.Count(m.PythonVersion, ".") == 2},
		{"python path is the host's", m.PythonPath == DefaultPython},
		{"stdlib is under /usr", strings.HasPrefix(m.Stdlib, "/usr/lib") && strings.Contains(m.Stdlib, "python3.")},
		{"files counted", m.Files > 500},
		{"bytes counted", m.Bytes > 10<<20},
		{"CA certificates counted", m.CACerts > 0},
		{"content hash set", len(m.ContentSHA256) == 64},
		{"built recently", time.Since(m.BuiltAt) < time.Hour},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("manifest: %s: got %+v", c.name, m)
		}
	}
}

func TestBuildLayout(t *testing.T) {
	dir, m := buildOnce(t)
	regular := []string{
		jaillayout.PythonPath,
		m.Stdlib + "/os.py",
		m.Stdlib + "/__pycache__/os.cpython-" + pyTag(m) + ".pyc",
		m.Stdlib + "/json/__pycache__/decoder.cpython-" + pyTag(m) + ".pyc",
		"/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/resolv.conf",
		jaillayout.CABundlePath, jaillayout.OpenSSLDir + "/cert.pem",
		jaillayout.ManifestPath,
	}
	for _, f := range harness.Files() {
		regular = append(regular, jaillayout.HarnessDir+"/"+f)
	}
	for _, p := range regular {
		t.Run("regular file "+p, func(t *testing.T) {
			fi, err := os.Lstat(filepath.Join(dir, p))
			if err != nil {
				t.Fatal(err)
			}
			if !fi.Mode().IsRegular() {
				t.Errorf("%s: mode %v, want a regular file", p, fi.Mode())
			}
		})
	}
	dirs := []string{"/tmp", "/dev", "/dev/shm", "/proc", jaillayout.DepsDir, jaillayout.EgressDir, jaillayout.HarnessDir, m.Stdlib + "/lib-dynload", jaillayout.OpenSSLDir + "/certs"}
	for _, p := range dirs {
		t.Run("directory "+p, func(t *testing.T) {
			fi, err := os.Stat(filepath.Join(dir, p))
			if err != nil {
				t.Fatal(err)
			}
			if !fi.IsDir() {
				t.Errorf("%s: mode %v, want a directory", p, fi.Mode())
			}
		})
	}
	// Libraries resolve at their host paths, through relative links only.
	for _, p := range []string{"/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libssl.so.3", "/lib/x86_64-linux-gnu/libffi.so.8"} {
		t.Run("library "+p, func(t *testing.T) {
			if _, err := os.Stat(p); err != nil {
				t.Skipf("host has no %s", p)
			}
			fi, err := os.Stat(filepath.Join(dir, p))
			if err != nil {
				t.Fatal(err)
			}
			if !fi.Mode().IsRegular() {
				t.Errorf("%s resolves to mode %v", p, fi.Mode())
			}
		})
	}
	dropped := []string{
		m.Stdlib + "/test", m.Stdlib + "/idlelib", m.Stdlib + "/tkinter", m.Stdlib + "/ensurepip",
		m.Stdlib + "/turtledemo", m.Stdlib + "/pydoc_data", m.Stdlib + "/lib2to3/tests",
		m.Stdlib + "/ctypes/test", m.Stdlib + "/unittest/test", m.Stdlib + "/sitecustomize.py",
		"/usr/lib/python3/dist-packages", "/root", "/home", "/etc/shadow",
	}
	for _, p := range dropped {
		t.Run("absent "+p, func(t *testing.T) {
			if _, err := os.Lstat(filepath.Join(dir, p)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: present (err %v), want absent", p, err)
			}
		})
	}
	dyn, err := os.ReadDir(filepath.Join(dir, m.Stdlib, "lib-dynload"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range dyn {
		if strings.HasPrefix(e.Name(), "_test") || strings.HasPrefix(e.Name(), "xxlimited") {
			t.Errorf("lib-dynload ships test module %s", e.Name())
		}
	}
}

func TestBuildInterpreterIsExecutableButNotReadable(t *testing.T) {
	dir, _ := buildOnce(t)
	fi, err := os.Stat(filepath.Join(dir, jaillayout.PythonPath))
	if err != nil {
		t.Fatal(err)
	}
	// Others (the tool's uid) may run it, not read it: every process of
	// the jail starts non-dumpable.
	if got := fi.Mode().Perm(); got != 0o711 {
		t.Errorf("%s: mode %v, want 0711", jaillayout.PythonPath, got)
	}
}

func TestBuildShipsTheTimeZoneDatabaseDereferenced(t *testing.T) {
	if _, err := os.Stat("/usr/share/zoneinfo/Europe/Berlin"); err != nil {
		t.Skipf("the host has no time zone database: %v", err)
	}
	dir, _ := buildOnce(t)
	zi := filepath.Join(dir, jaillayout.ZoneinfoDir)
	for _, p := range []string{"Europe/Berlin", "UTC", "America/New_York", "zone1970.tab"} {
		fi, err := os.Lstat(filepath.Join(zi, p))
		if err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s/%s: %v %v, want a regular file", jaillayout.ZoneinfoDir, p, fi, err)
		}
	}
	want, _ := os.ReadFile("/usr/share/zoneinfo/Europe/Berlin")
	if got, _ := os.ReadFile(filepath.Join(zi, "Europe/Berlin")); !bytes.Equal(got, want) || len(got) == 0 {
		t.Errorf("Europe/Berlin differs from the host's (%d bytes, host %d)", len(got), len(want))
	}
	if _, err := os.Lstat(filepath.Join(zi, "localtime")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("localtime (the host's configuration) was shipped: %v", err)
	}
	err := filepath.WalkDir(zi, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSymlink != 0 {
			t.Errorf("%s is a symlink; the database must be dereferenced", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func pyTag(m *Manifest) string {
	parts := strings.SplitN(m.PythonVersion, ".", 3)
	return parts[0] + parts[1]
}

func TestBuildUsersAndGroups(t *testing.T) {
	dir, _ := buildOnce(t)
	passwd, err := os.ReadFile(filepath.Join(dir, "/etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(passwd), "tool:x:99999:99999:") || !strings.Contains(string(passwd), "nobody:x:65534:") {
		t.Errorf("/etc/passwd lacks tool 99999 or nobody:\n%s", passwd)
	}
	host, _ := os.ReadFile("/etc/passwd")
	if bytes.Equal(host, passwd) {
		t.Error("/etc/passwd is the host's")
	}
	group, err := os.ReadFile(filepath.Join(dir, "/etc/group"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(group), "tool:x:99999:") {
		t.Errorf("/etc/group lacks tool 99999:\n%s", group)
	}
}

func TestBuildTreeIsSafe(t *testing.T) {
	dir, m := buildOnce(t)
	s, err := scanTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Setid) > 0 {
		t.Errorf("setuid/setgid files: %v", s.Setid)
	}
	if len(s.OtherWritable) > 0 {
		t.Errorf("group/other-writable entries: %v", s.OtherWritable)
	}
	if len(s.Escaping) > 0 {
		t.Errorf("symlinks leaving the tree: %v", s.Escaping)
	}
	if len(s.Special) > 0 {
		t.Errorf("special files: %v", s.Special)
	}
	if s.SHA256 != m.ContentSHA256 || s.Files != m.Files || s.Bytes != m.Bytes {
		t.Errorf("rescan = %d files, %d bytes, %s; manifest says %d, %d, %s", s.Files, s.Bytes, s.SHA256, m.Files, m.Bytes, m.ContentSHA256)
	}
	if os.Geteuid() == 0 {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
				t.Errorf("%s owned by %d:%d, want root", p, st.Uid, st.Gid)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestBuildTrustStoreIsDereferenced(t *testing.T) {
	dir, m := buildOnce(t)
	data, err := os.ReadFile(filepath.Join(dir, jaillayout.CABundlePath))
	if err != nil {
		t.Fatal(err)
	}
	if _, n := parseCABundle(data); n != m.CACerts || n == 0 {
		t.Errorf("bundle holds %d certificates, manifest says %d", n, m.CACerts)
	}
	for _, d := range []string{jaillayout.CADir, jaillayout.OpenSSLDir + "/certs"} {
		entries, err := os.ReadDir(filepath.Join(dir, d))
		if err != nil {
			t.Fatal(err)
		}
		hashed := 0
		for _, e := range entries {
			if e.Type()&fs.ModeSymlink != 0 {
				t.Errorf("%s/%s is a symlink", d, e.Name())
			}
			if hashedCertName.MatchString(e.Name()) {
				hashed++
			}
		}
		if _, err := os.Stat(defaultCADir); err == nil && hashed == 0 {
			t.Errorf("%s has no hash-named certificates", d)
		}
	}
}

func TestBuildFailsWithoutCACertificates(t *testing.T) {
	tmp := t.TempDir()
	empty := filepath.Join(tmp, "empty.pem")
	garbage := filepath.Join(tmp, "garbage.pem")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(garbage, []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, bundle string }{
		{"empty bundle", empty},
		{"bundle without a parseable certificate", garbage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(tmp, "rootfs-"+strings.ReplaceAll(tc.name, " ", "-"))
			_, err := Build(context.Background(), Options{Dir: dir, CABundle: tc.bundle})
			if !errors.Is(err, ErrEmptyCAStore) {
				t.Fatalf("Build = %v, want ErrEmptyCAStore", err)
			}
			if !strings.Contains(err.Error(), tc.bundle) {
				t.Errorf("error %q does not name the bundle %s", err, tc.bundle)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s left behind after a failed build", dir)
			}
			leftovers, _ := filepath.Glob(dir + ".tmp-*")
			if len(leftovers) > 0 {
				t.Errorf("temporary build dirs left behind: %v", leftovers)
			}
		})
	}
}

func TestBuildRefusesToReplaceAForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "precious.txt")
	if err := os.WriteFile(keep, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Build(context.Background(), Options{Dir: dir})
	if !errors.Is(err, ErrNotRootfs) {
		t.Fatalf("Build = %v, want ErrNotRootfs", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("foreign file gone: %v", err)
	}
}

func TestBuildRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no dir", Options{}, "rootfs dir"},
		{"root dir", Options{Dir: "/"}, "refusing to use /"},
		{"missing python", Options{Dir: filepath.Join(t.TempDir(), "r"), PythonPath: "/nonexistent/python3"}, "/nonexistent/python3"},
		{"relative python", Options{Dir: filepath.Join(t.TempDir(), "r"), PythonPath: "python3"}, "must be absolute"},
		{"missing bundle", Options{Dir: filepath.Join(t.TempDir(), "r"), CABundle: "/nonexistent/ca.pem"}, "/nonexistent/ca.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(context.Background(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Build = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}
