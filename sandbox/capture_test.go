package sandbox

import (
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"github.com/execgate/execgate/internal/jsonsize"
)

func TestCaptureKeepsTheCapAndDrainsTheRest(t *testing.T) {
	tests := []struct {
		name      string
		input     string
		max       int
		want      string
		truncated bool
	}{
		{"under the cap", "hello", 10, "hello", false},
		{"exactly the cap", "hello", 5, "hello", false},
		{"over the cap", "hello world", 5, "hello", true},
		{"zero cap", "x", 0, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := capture{max: tt.max}
			c.readFrom(iotest.OneByteReader(strings.NewReader(tt.input)))
			if string(c.buf) != tt.want || c.truncated != tt.truncated || c.total != int64(len(tt.input)) {
				t.Errorf("got %q truncated=%t total=%d", string(c.buf), c.truncated, c.total)
			}
		})
	}
}

func TestLogCaptureBoundsLines(t *testing.T) {
	var in strings.Builder
	for i := 0; i < maxLogLines+3; i++ {
		in.WriteString("line\n")
	}
	in.WriteString(strings.Repeat("x", maxLogLineBytes+10) + "\n")
	var l logCapture
	l.readFrom(strings.NewReader(in.String()))
	if len(l.lines) != maxLogLines || l.dropped != 4 {
		t.Errorf("%d lines, %d dropped", len(l.lines), l.dropped)
	}
	var long logCapture
	long.readFrom(strings.NewReader(strings.Repeat("y", maxLogLineBytes+10)))
	if len(long.lines) != 1 || len(long.lines[0]) > maxLogLineBytes+len("…") {
		t.Errorf("long line kept as %d bytes", len(long.lines[0]))
	}
}

func TestTextCaptureCapsTheEncodedSize(t *testing.T) {
	tests := []struct {
		name      string
		input     string
		max       int
		want      string
		truncated bool
	}{
		{"plain text under the cap", "hello", 10, "hello", false},
		{"plain text at the cap", "hello", 5, "hello", false},
		{"control bytes cost six each", strings.Repeat("\x01", 10), 12, "\x01\x01", true},
		{"a control byte that does not fit is cut whole", "ab\x01", 7, "ab", true},
		{"newlines cost two", "a\nb\n", 5, "a\nb", true},
		{"multi-byte characters are never split", "héllo", 2, "h", true},
		{"invalid UTF-8 costs six", "a\xffb", 7, "a\xff", true},
		{"an incomplete character at the end is invalid", "a\xe2\x82", 13, "a\xe2\x82", false},
		{"zero cap", "x", 0, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := textCapture{max: tt.max}
			c.readFrom(iotest.OneByteReader(strings.NewReader(tt.input)))
			got := c.String()
			if got != tt.want || c.truncated != tt.truncated || c.total != int64(len(tt.input)) {
				t.Errorf("got %q truncated=%t total=%d, want %q truncated=%t", got, c.truncated, c.total, tt.want, tt.truncated)
			}
			if n := jsonsize.StringLen(got) - 2; n > tt.max {
				t.Errorf("kept %d encoded bytes, cap %d", n, tt.max)
			}
		})
	}
}

func TestTextCaptureOfAFloodHoldsNoMoreThanTheCap(t *testing.T) {
	const max = 256 << 10
	c := textCapture{max: max}
	c.readFrom(strings.NewReader(strings.Repeat("\x01", 4<<20)))
	if !c.truncated || c.total != 4<<20 {
		t.Fatalf("truncated=%t total=%d", c.truncated, c.total)
	}
	if n := jsonsize.StringLen(c.String()) - 2; n > max || n < max-6 {
		t.Errorf("kept %d encoded bytes, want just under %d", n, max)
	}
	if cap(c.buf) > max {
		t.Errorf("buffer capacity %d over the cap %d", cap(c.buf), max)
	}
}

// Issue #15 §4: live output sees exactly the bytes the capture keeps, in
// whole characters, whatever the writes' boundaries, and nothing kept
// before a watcher was set.
func TestTextCaptureTellsItsWatcherExactlyWhatItKeeps(t *testing.T) {
	input := "before|héllo wörld \x01 ✓ " + strings.Repeat("é", 40)
	c := textCapture{max: 60, observe: &outputHook{stream: StreamStderr}}
	c.write([]byte(input[:7])) // "before|": kept, told to no one
	var seen strings.Builder
	fn := OutputFunc(func(stream string, p []byte) {
		if stream != StreamStderr {
			t.Errorf("stream = %q", stream)
		}
		seen.Write(p)
		if !utf8.Valid(p) {
			t.Errorf("a chunk splits a character: %q", p)
		}
	})
	c.observe.fn.Store(&fn)
	rest := []byte(input[7:])
	for i := 0; i < len(rest); i += 3 { // 3-byte writes split the 2-byte é
		c.write(rest[i:min(i+3, len(rest))])
	}
	c.measure(true)
	if !c.truncated {
		t.Fatal("the input was meant to overflow the cap")
	}
	if want := strings.TrimPrefix(c.String(), "before|"); seen.String() != want {
		t.Fatalf("watcher saw %q, the capture kept %q (after the hand-off)", seen.String(), want)
	}
}
