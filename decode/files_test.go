package decode

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/limits"
)

func TestDecodeFilesAndStdin(t *testing.T) {
	bigCaps := Caps{Body: 1 << 30, Source: 100, Args: 50}
	many := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"source":"x","files":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"path":"f%d","content":""}`, i)
		}
		b.WriteString(`]}`)
		return b.String()
	}
	tests := []struct {
		name    string
		body    string
		status  int
		message string
	}{
		{"text and base64 files decode", `{"source":"x","files":[{"path":"data/in.csv","content":"a,b\n"},{"path":"b.bin","content":"AAEC","encoding":"base64"}],"stdin":"hello"}`, 0, ""},
		{"an empty file decodes", `{"source":"x","files":[{"path":"empty","content":""}]}`, 0, ""},
		{"a parent directory", `{"source":"x","files":[{"path":"../x","content":""}]}`, 400, `files[0].path: "../x" has a ".." component`},
		{"an absolute path", `{"source":"x","files":[{"path":"/etc/passwd","content":""}]}`, 400, `files[0].path: "/etc/passwd" is absolute`},
		{"a path climbing out", `{"source":"x","files":[{"path":"ok","content":""},{"path":"a/../../b","content":""}]}`, 400, `files[1].path: "a/../../b" has a ".." component`},
		{"a NUL in a path", `{"source":"x","files":[{"path":"a\u0000b","content":""}]}`, 400, `files[0].path: "a\x00b" contains the control character U+0000`},
		{"an over-long name", `{"source":"x","files":[{"path":"` + strings.Repeat("n", 256) + `","content":""}]}`, 400, "has a component of 256 bytes; at most 255"},
		{"a path under out/", `{"source":"x","files":[{"path":"out/r.csv","content":""}]}`, 400, "under out/"},
		{"a path twice", `{"source":"x","files":[{"path":"a","content":""},{"path":"a","content":"2"}]}`, 400, `files[1].path: "a" is given twice`},
		{"a file below a file", `{"source":"x","files":[{"path":"a","content":""},{"path":"a/b","content":""}]}`, 400, `files[1].path: "a/b" is below "a"`},
		{"a missing content", `{"source":"x","files":[{"path":"a"}]}`, 400, "files[0].content: is required"},
		{"an unknown file field", `{"source":"x","files":[{"path":"a","content":"","mode":"0777"}]}`, 400, "files[0].mode: unknown field"},
		{"an unknown encoding", `{"source":"x","files":[{"path":"a","content":"","encoding":"hex"}]}`, 400, `files[0].encoding: "hex" is not one of utf8, base64`},
		{"bad base64", `{"source":"x","files":[{"path":"a","content":"!!","encoding":"base64"}]}`, 400, "files[0].content: is not standard base64"},
		{"files of the wrong type", `{"source":"x","files":{"a":"b"}}`, 400, "files: must be an array"},
		{"ten thousand tiny files", many(10000), 413, "files: 10000 files; the platform allows at most 1000"},
		{"stdin over the args cap", `{"source":"x","stdin":"` + strings.Repeat("s", 51) + `"}`, 413, "stdin: 51 bytes is over the 50-byte cap"},
		{"stdin of the wrong type", `{"source":"x","stdin":["a"]}`, 400, "stdin: must be a string, got an array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := Execute([]byte(tt.body), bigCaps)
			if tt.status == 0 {
				if err != nil {
					t.Fatalf("Execute: %v", err)
				}
				for _, f := range req.Files {
					if f.Path == "b.bin" && string(f.Content) != "\x00\x01\x02" {
						t.Errorf("base64 content decoded to %q", f.Content)
					}
				}
				return
			}
			var ae *execution.Error
			if !errors.As(err, &ae) || ae.Status != tt.status || !strings.Contains(ae.Message, tt.message) {
				t.Fatalf("Execute = %v; want %d with %q", err, tt.status, tt.message)
			}
		})
	}
}

// A file set over the platform's files_bytes is refused naming the file
// that went over; a base64 content is refused by its encoded length,
// before it is decoded.
func TestDecodeFilesRefusesTooManyBytesNamingTheFile(t *testing.T) {
	caps := Caps{Body: 1 << 30, Source: 100, Args: 50}
	half := strings.Repeat("a", int(limits.Max.FilesBytes/2))
	body := `{"source":"x","files":[{"path":"one","content":"` + half + `"},{"path":"two","content":"` + half + `"},{"path":"three","content":"x"}]}`
	_, err := Execute([]byte(body), caps)
	var ae *execution.Error
	if !errors.As(err, &ae) || ae.Status != 413 || !strings.HasPrefix(ae.Message, `files[2] ("three"): 1 bytes`) {
		t.Fatalf("Execute = %v; want 413 naming files[2] (\"three\")", err)
	}
	big := base64.StdEncoding.EncodeToString(make([]byte, limits.Max.FilesBytes+3))
	_, err = Execute([]byte(`{"source":"x","files":[{"path":"big.bin","encoding":"base64","content":"`+big+`"}]}`), caps)
	if !errors.As(err, &ae) || ae.Status != 413 || !strings.Contains(ae.Message, `files[0] ("big.bin"): its content decodes to about`) {
		t.Fatalf("Execute = %v; want 413 naming files[0] by its encoded size", err)
	}
}
