package sandbox

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
)

// capture keeps the first max bytes read from r and discards the rest, so a
// tool printing without end never blocks on a full pipe and never grows the
// gateway's memory past the cap.
type capture struct {
	max       int
	buf       bytes.Buffer
	truncated bool
	total     int64
}

// readFrom reads r to EOF or error.
func (c *capture) readFrom(r io.Reader) {
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			c.total += int64(n)
			keep := min(n, c.max-c.buf.Len())
			if keep > 0 {
				c.buf.Write(chunk[:keep])
			}
			if keep < n {
				c.truncated = true
			}
		}
		if err != nil {
			return
		}
	}
}

// Write keeps what fits under the cap and reports everything as written,
// so a writer (an installer's output) is never blocked or failed by it.
func (c *capture) Write(p []byte) (int, error) {
	c.total += int64(len(p))
	keep := min(len(p), c.max-c.buf.Len())
	if keep > 0 {
		c.buf.Write(p[:keep])
	}
	if keep < len(p) {
		c.truncated = true
	}
	return len(p), nil
}

// text returns what a capture kept, marking a cut.
func (c *capture) text() string {
	s := string(bytes.TrimSpace(c.buf.Bytes()))
	if c.truncated {
		s += fmt.Sprintf("\n…[%d more bytes of installer output cut]", c.total-int64(c.buf.Len()))
	}
	return s
}

// logCapture keeps nsjail's log lines, at most maxLines of at most
// maxLineBytes each.
type logCapture struct {
	lines   []string
	dropped int
}

const (
	maxLogLines     = 200
	maxLogLineBytes = 2048
)

func (l *logCapture) readFrom(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r\n ")
		switch {
		case line == "":
		case len(l.lines) >= maxLogLines:
			l.dropped++
		case len(line) > maxLogLineBytes:
			l.lines = append(l.lines, line[:maxLogLineBytes]+"…")
		default:
			l.lines = append(l.lines, line)
		}
	}
	if sc.Err() != nil {
		// A line longer than the scanner's buffer: drop the rest.
		_, _ = io.Copy(io.Discard, r)
	}
}
