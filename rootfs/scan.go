package rootfs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/execgate/execgate/jaillayout"
)

// scanResult is what one walk of a rootfs finds.
type scanResult struct {
	Files  int    // regular files, manifest excluded
	Bytes  int64  // their sizes
	SHA256 string // content hash (see Manifest.ContentSHA256)
	// Findings that fail verification, as jail paths.
	Setid         []string // setuid/setgid files
	OtherWritable []string // writable by group or others
	Escaping      []string // symlinks whose target leaves the tree
	Special       []string // devices, fifos, sockets
}

// scanTree walks root without following symlinks and hashes it.
//
// The hash covers, in lexical order, every entry's jail path, type and
// permission bits; for files their SHA-256, for symlinks their target. The
// manifest is left out so it can carry the hash.
func scanTree(root string) (*scanResult, error) {
	var res scanResult
	h := sha256.New()
	buf := make([]byte, 256<<10)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		jp := "/" + filepath.ToSlash(rel)
		if rel == "." {
			jp = "/"
		}
		if jp == jaillayout.ManifestPath {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode()
		if mode&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			res.Setid = append(res.Setid, jp)
		}
		if mode.Type() != fs.ModeSymlink && mode.Perm()&0o022 != 0 {
			res.OtherWritable = append(res.OtherWritable, jp)
		}
		switch {
		case mode.IsRegular():
			sum, err := hashFile(p, buf)
			if err != nil {
				return err
			}
			res.Files++
			res.Bytes += fi.Size()
			fmt.Fprintf(h, "f %s %o %d %s\n", jp, mode.Perm()|mode&(fs.ModeSetuid|fs.ModeSetgid), fi.Size(), sum)
		case mode.IsDir():
			fmt.Fprintf(h, "d %s %o\n", jp, mode.Perm()|mode&(fs.ModeSetuid|fs.ModeSetgid))
		case mode.Type() == fs.ModeSymlink:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if escapes(jp, target) {
				res.Escaping = append(res.Escaping, jp+" -> "+target)
			}
			fmt.Fprintf(h, "l %s %s\n", jp, target)
		default:
			res.Special = append(res.Special, jp)
			fmt.Fprintf(h, "s %s %s\n", jp, mode.Type())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scanning %s: %w", root, err)
	}
	res.SHA256 = hex.EncodeToString(h.Sum(nil))
	return &res, nil
}

// escapes reports whether a symlink at jail path link with the given target
// would leave the tree when followed from the host: absolute targets do
// (they name host paths outside the jail), and so do relative ones that
// climb above the root.
func escapes(link, target string) bool {
	if path.IsAbs(target) {
		return true
	}
	depth := strings.Count(path.Dir(link), "/")
	if path.Dir(link) == "/" {
		depth = 0
	}
	for _, part := range strings.Split(target, "/") {
		switch part {
		case "..":
			depth--
			if depth < 0 {
				return true
			}
		case "", ".":
		default:
			depth++
		}
	}
	return false
}

func hashFile(p string, buf []byte) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, f, buf); err != nil {
		return "", fmt.Errorf("hashing %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
