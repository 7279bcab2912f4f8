// Package workspace is a run's /workspace (issue #24): the input files a
// request carries, read-only, and /workspace/out, where the tool leaves
// its artifacts, which the runner collects after the run.
//
// A workspace is two tmpfs the runner makes outside the jail (fsopen and
// fsmount: detached mounts of the host, which live as long as a
// descriptor of theirs does, so nothing is left mounted when execgate
// dies):
//
//	/workspace       the inputs: files and directories of root's, the
//	                 files 0444; the jail gets it read-only. Sized by the
//	                 run's files_bytes, its inodes by its files.
//	/workspace/out   the tool's: its root is 0700 of the jail's host uid;
//	                 the jail gets it writable, nosuid, nodev, noexec.
//	                 Sized by the run's tmp_mb, its inodes by outInodes.
//
// At level jail the runner attaches both below its view directory and
// nsjail binds them (Attach); at level process the zygote's child moves
// detached clones of them into its own mount namespace (Clones). Either
// way the runner writes the inputs through its own descriptor at the
// hand-off (Write), which a warm jail sees at once, and after the run,
// with the run's processes gone, reads out/ through its descriptor
// (Collect): names checked, links, FIFOs, sockets, devices and directories
// dropped, sizes taken from fstat before reading and no more read, within
// the run's artifacts and artifacts_bytes. The rest is dropped, each with
// its reason.
//
// This file holds the rules for names, which the request decoder applies
// too (portable).
package workspace

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// Bounds on input paths and artifact names.
const (
	// MaxPathBytes bounds an input file's path; MaxNameBytes each of its
	// components and an artifact's name (NAME_MAX); MaxDepth the
	// components of a path.
	MaxPathBytes = 1024
	MaxNameBytes = 255
	MaxDepth     = 8
	// OutDir is the component of /workspace an input may not be under
	// (it is /workspace/out, the tool's).
	OutDir = "out"
)

// CheckPath reports what is wrong with p as the path of an input file
// under /workspace: it must be relative, normalised (no ".", "..", empty
// or trailing components), of valid UTF-8 without control characters or
// backslashes, at most MaxDepth components of at most MaxNameBytes each,
// MaxPathBytes in all, and not under out/.
func CheckPath(p string) error {
	switch {
	case p == "":
		return errors.New("is empty")
	case len(p) > MaxPathBytes:
		return fmt.Errorf("is %d bytes; at most %d", len(p), MaxPathBytes)
	case !utf8.ValidString(p):
		return errors.New("is not valid UTF-8")
	case strings.HasPrefix(p, "/"):
		return errors.New("is absolute; paths are relative to /workspace")
	}
	if err := checkChars(p, true); err != nil {
		return err
	}
	parts := strings.Split(p, "/")
	for _, c := range parts {
		switch {
		case c == "..":
			return errors.New(`has a ".." component`)
		case c == "." || c == "":
			return errors.New("is not normalised (an empty or \".\" component)")
		case len(c) > MaxNameBytes:
			return fmt.Errorf("has a component of %d bytes; at most %d", len(c), MaxNameBytes)
		}
	}
	if path.Clean(p) != p {
		return errors.New("is not normalised")
	}
	if len(parts) > MaxDepth {
		return fmt.Errorf("is %d components deep; at most %d", len(parts), MaxDepth)
	}
	if parts[0] == OutDir {
		return errors.New("is under out/, where the tool's artifacts go")
	}
	return nil
}

// CheckName reports what is wrong with n as an artifact's name: a file
// directly in /workspace/out, 1 to MaxNameBytes bytes of valid UTF-8
// without control characters, slashes or backslashes, and not "." or "..".
func CheckName(n string) error {
	switch {
	case n == "":
		return errors.New("is empty")
	case len(n) > MaxNameBytes:
		return fmt.Errorf("is %d bytes; at most %d", len(n), MaxNameBytes)
	case !utf8.ValidString(n):
		return errors.New("is not valid UTF-8")
	case n == "." || n == "..":
		return fmt.Errorf("is %q", n)
	}
	return checkChars(n, false)
}

// checkChars refuses control characters (C0, DEL, C1), backslashes and,
// unless slashOK, slashes.
func checkChars(s string, slashOK bool) error {
	for _, r := range s {
		switch {
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			return fmt.Errorf("contains the control character %U", r)
		case r == '\\':
			return errors.New("contains a backslash")
		case r == '/' && !slashOK:
			return errors.New("contains a slash")
		}
	}
	return nil
}

// CheckMIME reports what is wrong with m as a media type a tool gave an
// artifact: type/subtype of lower-case RFC 6838 characters, at most 127
// bytes, no parameters.
func CheckMIME(m string) error {
	if len(m) > 127 {
		return fmt.Errorf("is %d bytes; at most 127", len(m))
	}
	typ, sub, ok := strings.Cut(m, "/")
	if !ok || !mimeToken(typ) || !mimeToken(sub) {
		return fmt.Errorf("%q is not a media type (type/subtype, lower case, no parameters)", m)
	}
	return nil
}

// mimeToken: RFC 6838's restricted-name, lower case.
func mimeToken(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && strings.IndexByte("!#$&-^_.+", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// DefaultMIME is the media type of an artifact whose name's extension is
// not in the table and that was saved without one.
const DefaultMIME = "application/octet-stream"

// mimeByExt is the fixed table of media types by extension (lower case,
// with the dot). Content is never sniffed.
var mimeByExt = map[string]string{
	".png":     "image/png",
	".jpg":     "image/jpeg",
	".jpeg":    "image/jpeg",
	".gif":     "image/gif",
	".webp":    "image/webp",
	".svg":     "image/svg+xml",
	".bmp":     "image/bmp",
	".ico":     "image/vnd.microsoft.icon",
	".tif":     "image/tiff",
	".tiff":    "image/tiff",
	".pdf":     "application/pdf",
	".csv":     "text/csv",
	".tsv":     "text/tab-separated-values",
	".txt":     "text/plain",
	".log":     "text/plain",
	".md":      "text/markdown",
	".html":    "text/html",
	".htm":     "text/html",
	".css":     "text/css",
	".xml":     "application/xml",
	".json":    "application/json",
	".jsonl":   "application/jsonl",
	".ndjson":  "application/x-ndjson",
	".yaml":    "application/yaml",
	".yml":     "application/yaml",
	".js":      "text/javascript",
	".zip":     "application/zip",
	".gz":      "application/gzip",
	".tar":     "application/x-tar",
	".parquet": "application/vnd.apache.parquet",
	".xlsx":    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
	".docx":    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
	".pptx":    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
	".wav":     "audio/wav",
	".mp3":     "audio/mpeg",
	".mp4":     "video/mp4",
	".webm":    "video/webm",
}

// MIMEOf is the media type of an artifact named name: explicit when the
// tool gave one that CheckMIME accepts, else by the name's extension from
// the fixed table, else DefaultMIME.
func MIMEOf(name, explicit string) string {
	if explicit != "" && CheckMIME(explicit) == nil {
		return explicit
	}
	if m, ok := mimeByExt[strings.ToLower(path.Ext(name))]; ok {
		return m
	}
	return DefaultMIME
}

// CheckFiles reports the first file of files that breaks the rules of an
// input set, by index: a path CheckPath refuses, a path given twice, or a
// file that is also another's directory. Counts and sizes are the
// caller's (they are limits, not rules).
func CheckFiles(files []File) (int, error) {
	seen := make(map[string]bool, len(files)) // path → is a directory
	for i, f := range files {
		if err := CheckPath(f.Path); err != nil {
			return i, fmt.Errorf("path %w", err)
		}
		if dir, ok := seen[f.Path]; ok {
			if dir {
				return i, errors.New("is also the directory of another file")
			}
			return i, errors.New("is given twice")
		}
		for d := path.Dir(f.Path); d != "."; d = path.Dir(d) {
			if dir, ok := seen[d]; ok && !dir {
				return i, fmt.Errorf("is below %q, which is a file", d)
			}
			seen[d] = true
		}
		seen[f.Path] = false
	}
	return -1, nil
}
