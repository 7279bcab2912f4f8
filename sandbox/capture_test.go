package sandbox

import (
	"strings"
	"testing"
	"testing/iotest"
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
			if c.buf.String() != tt.want || c.truncated != tt.truncated || c.total != int64(len(tt.input)) {
				t.Errorf("got %q truncated=%t total=%d", c.buf.String(), c.truncated, c.total)
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
