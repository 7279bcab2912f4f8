package decode

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/sandbox/workspace"
)

// Input files and stdin of an execute request (issue #24). The files are
// checked against the platform's maxima here (limits.Max: files,
// files_bytes), before anything else is decided; the flow checks them
// against the decided limits once the policy has spoken. The body cap
// (server.max_body_bytes) bounds them first: they travel in the body.

// Encodings of a file's content.
const (
	EncodingUTF8   = "utf8"
	EncodingBase64 = "base64"
)

// filesField decodes "files": [{"path", "content", "encoding"}] into dst.
// Errors name the file by index and path: a bad path, encoding or content
// is 400; more files, or more bytes, than the platform allows is 413.
func filesField(dst *[]sandbox.File) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		raw = bytes.TrimSpace(raw)
		if kindOf(raw) != "an array" {
			return execution.BadRequest(p, "must be an array of {\"path\", \"content\", \"encoding\"}, got %s", kindOf(raw))
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return execution.BadRequest(p, "must be an array of objects")
		}
		if n := int64(len(items)); n > limits.Max.Files {
			return execution.Oversize(p, "%d files; the platform allows at most %d (limits.files)", n, limits.Max.Files)
		}
		files := make([]sandbox.File, 0, len(items))
		var total int64
		for i, it := range items {
			f, err := decodeFile(fmt.Sprintf("%s[%d]", p, i), it, limits.Max.FilesBytes-total)
			if err != nil {
				return err
			}
			total += int64(len(f.Content))
			files = append(files, f)
		}
		if i, err := workspace.CheckFiles(files); err != nil {
			return execution.BadRequest(fmt.Sprintf("%s[%d].path", p, i), "%q %v", files[i].Path, err)
		}
		*dst = files
		return nil
	}
}

// decodeFile decodes one file object at path p whose content may hold at
// most left bytes (what the platform's files_bytes leaves); a base64
// content is refused by its encoded length before it is decoded.
func decodeFile(p string, raw json.RawMessage, left int64) (sandbox.File, error) {
	var f sandbox.File
	var content, encoding string
	var sawPath, sawContent bool
	err := decodeObject(p, raw, fieldFuncs{
		"path": func(q string, raw json.RawMessage) error {
			sawPath = true
			if err := decodeString(q, raw, &f.Path); err != nil {
				return err
			}
			if err := workspace.CheckPath(f.Path); err != nil {
				return execution.BadRequest(q, "%q %v", f.Path, err)
			}
			return nil
		},
		"content": func(q string, raw json.RawMessage) error {
			sawContent = true
			return decodeString(q, raw, &content)
		},
		"encoding": func(q string, raw json.RawMessage) error {
			if err := decodeString(q, raw, &encoding); err != nil {
				return err
			}
			return oneOf(q, encoding, EncodingUTF8, EncodingBase64)
		},
	})
	switch {
	case err != nil:
		return f, err
	case !sawPath:
		return f, execution.BadRequest(p+".path", "is required")
	case !sawContent:
		return f, execution.BadRequest(p+".content", "is required (\"\" for an empty file)")
	}
	name := fmt.Sprintf("%s (%q)", p, f.Path)
	switch encoding {
	case EncodingBase64:
		if n := int64(base64.StdEncoding.DecodedLen(len(content))); n > left+2 {
			return f, execution.Oversize(name, "its content decodes to about %d bytes; the platform allows %d bytes of files in all (limits.files_bytes)", n, limits.Max.FilesBytes)
		}
		b, err := base64.StdEncoding.DecodeString(content)
		if err != nil {
			return f, execution.BadRequest(p+".content", "is not standard base64 (with padding): %v", err)
		}
		f.Content = b
	default:
		f.Content = []byte(content)
	}
	if int64(len(f.Content)) > left {
		return f, execution.Oversize(name, "%d bytes; the platform allows %d bytes of files in all (limits.files_bytes)", len(f.Content), limits.Max.FilesBytes)
	}
	return f, nil
}

// stdinField decodes "stdin", a string bounded like args.
func stdinField(dst *string, limit int) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		if err := decodeString(p, raw, dst); err != nil {
			return err
		}
		if len(*dst) > limit {
			return execution.TooLarge(p, int64(len(*dst)), int64(limit))
		}
		return nil
	}
}
