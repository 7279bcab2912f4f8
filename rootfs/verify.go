package rootfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/execgate/execgate/jaillayout"
)

// Check is one verification step.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	Hint   string `json:"hint,omitempty"`
}

// Report is the outcome of Verify: every check, in order, and what the jail
// itself reported (nil when no jailed run happened).
type Report struct {
	Dir      string     `json:"dir"`
	Manifest *Manifest  `json:"manifest,omitempty"`
	Checks   []Check    `json:"checks"`
	Jail     *JailFacts `json:"jail,omitempty"`
	// Deno is what the JavaScript probe saw (nil without Deno or a run).
	Deno *DenoFacts `json:"deno,omitempty"`

	rebuild string // the hint that rebuilds this tree
}

// OK reports whether every check passed.
func (r *Report) OK() bool { return len(r.Failed()) == 0 }

// Failed returns the checks that did not pass.
func (r *Report) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

// Print writes the checks as a table.
func (r *Report) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range r.Checks {
		status := "ok"
		if !c.OK {
			status = "FAIL"
		}
		line := c.Detail
		if !c.OK && c.Hint != "" {
			line += " (hint: " + c.Hint + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", status, c.Name, line)
	}
	tw.Flush()
}

func (r *Report) add(name string, ok bool, detail, hint string) {
	r.Checks = append(r.Checks, Check{Name: name, OK: ok, Detail: detail, Hint: hint})
}

// err returns nil when every check passed, else an error wrapping ErrVerify
// (and, when the jail could not be created, the Jail's error).
func (r *Report) err(jailErr error) error {
	failed := r.Failed()
	if len(failed) == 0 {
		return nil
	}
	names := make([]string, len(failed))
	for i, c := range failed {
		names[i] = c.Name + ": " + c.Detail
	}
	err := fmt.Errorf("%w: %s: %s", ErrVerify, r.Dir, strings.Join(names, "; "))
	if jailErr != nil {
		return errors.Join(err, jailErr)
	}
	return err
}

// Verify checks the rootfs at dir, on the host and inside a real jail.
//
// On the host: the manifest matches this binary (protocol, harness), the
// tree's content hash matches the manifest, no setuid/setgid, writable,
// special or escaping entries exist, and the CA bundle is non-empty. In a
// jail opened by open on dir (jailverify.Opener: the real sandbox): the
// interpreter starts as uid 99999, ssl's default context loads a non-empty
// trust store, json/asyncio/ssl and every shipped extension module import,
// the standard library is pre-compiled, and no setuid/setgid file is
// visible.
//
// The Report lists every check; the error is non-nil when one failed
// (errors.Is(err, ErrVerify)), and also carries open's error (with the
// sandbox, a *sandbox.UnavailableError) when the jail could not be created
// at all.
func Verify(ctx context.Context, dir string, open OpenJail) (*Report, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("rootfs dir: %w", err)
	}
	r := &Report{Dir: abs}
	m, err := ReadManifest(abs)
	if err != nil {
		r.add("manifest", false, err.Error(), "build it: execgate rootfs build --runtime NAME --out "+abs)
		return r, r.err(nil)
	}
	r.Manifest = m
	r.rebuild = "rebuild: execgate rootfs build --runtime " + m.Runtime + " --out " + abs
	r.add("manifest", true, fmt.Sprintf("python %s, %d files, %.1f MiB, built %s", m.PythonVersion, m.Files, float64(m.Bytes)/(1<<20), m.BuiltAt.Format("2006-01-02 15:04:05Z")), "")
	verifyHost(r, m)
	jailErr := verifyJail(ctx, r, m, open)
	return r, r.err(jailErr)
}

func verifyHost(r *Report, m *Manifest) {
	hv := currentHarness()
	switch {
	case m.ProtocolVersion != hv.protocol:
		r.add("harness", false, fmt.Sprintf("rootfs speaks protocol %d, this binary %d", m.ProtocolVersion, hv.protocol), r.rebuild)
	case m.HarnessSHA256 != hv.sha256:
		r.add("harness", false, fmt.Sprintf("rootfs harness %.12s…, this binary's %.12s…", m.HarnessSHA256, hv.sha256), r.rebuild)
	default:
		r.add("harness", true, fmt.Sprintf("protocol %d, harness %.12s…", m.ProtocolVersion, m.HarnessSHA256), "")
	}

	reachable(r)

	s, err := scanTree(r.Dir)
	if err != nil {
		r.add("content", false, err.Error(), "")
		return
	}
	if s.SHA256 != m.ContentSHA256 || s.Files != m.Files || s.Bytes != m.Bytes {
		r.add("content", false, fmt.Sprintf("tree changed since the build: %d files, %d bytes, sha256 %.12s…; manifest: %d, %d, %.12s…",
			s.Files, s.Bytes, s.SHA256, m.Files, m.Bytes, m.ContentSHA256), r.rebuild)
	} else {
		r.add("content", true, fmt.Sprintf("sha256 %.12s… matches the manifest", s.SHA256), "")
	}
	list := func(name string, found []string, hint string) {
		if len(found) == 0 {
			r.add(name, true, "none", "")
			return
		}
		shown := found
		if len(shown) > 5 {
			shown = append(shown[:5:5], fmt.Sprintf("… %d more", len(found)-5))
		}
		r.add(name, false, strings.Join(shown, ", "), hint)
	}
	list("setuid/setgid files", s.Setid, "remove the bits; the builder never sets them")
	list("writable by group/others", s.OtherWritable, "chmod go-w; the builder never sets them")
	list("symlinks leaving the tree", s.Escaping, "a link to a host path would leak host files to host-side readers")
	list("special files", s.Special, "devices and fifos belong in the jail's /dev, not in the tree")

	data, err := os.ReadFile(filepath.Join(r.Dir, jaillayout.CABundlePath))
	if err != nil {
		r.add("CA bundle", false, err.Error(), "rebuild the rootfs")
		return
	}
	if _, n := parseCABundle(data); n == 0 || n != m.CACerts {
		r.add("CA bundle", false, fmt.Sprintf("%d certificates in %s, manifest says %d", n, jaillayout.CABundlePath, m.CACerts), "install ca-certificates on the host and rebuild")
	} else {
		r.add("CA bundle", true, fmt.Sprintf("%d certificates", n), "")
	}
}

// reachable checks that the jail's uid can traverse the rootfs directory
// itself. The directories above it may be private: the runner mounts the
// rootfs read-only under sandbox.runtime_dir and nsjail reaches it there
// (sandbox/view), but the root of that bind is this directory,
// whose mode the jail sees.
func reachable(r *Report) {
	fi, err := os.Stat(r.Dir)
	if err != nil {
		r.add("reachable by the jail", false, err.Error(), "")
		return
	}
	if fi.Mode().Perm()&0o001 == 0 {
		r.add("reachable by the jail", false, fmt.Sprintf("%s is not searchable by others (mode %v)", r.Dir, fi.Mode().Perm()), "chmod o+x "+r.Dir)
		return
	}
	r.add("reachable by the jail", true, "the rootfs dir is searchable (the directories above it may be private)", "")
}
