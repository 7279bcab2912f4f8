package sandbox

import (
	"bufio"
	"io"
	"strings"
	"sync/atomic"

	"github.com/execgate/execgate/internal/jsonsize"
)

// capture keeps the first max bytes read from r and discards the rest, so a
// writer printing without end never blocks on a full pipe and never grows
// the gateway's memory past the cap. It carries bytes as they are (the
// result envelope); the tool's stdout and stderr go
// through a textCapture, which counts what they cost once encoded.
type capture struct {
	max       int
	buf       []byte
	truncated bool
	total     int64
}

// readFrom reads r to EOF or error.
func (c *capture) readFrom(r io.Reader) {
	chunk := make([]byte, captureChunk)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			_, _ = c.Write(chunk[:n])
		}
		if err != nil {
			return
		}
	}
}

// Write keeps what fits under the cap and reports everything as written,
// so a writer is never blocked or failed by it.
func (c *capture) Write(p []byte) (int, error) {
	c.total += int64(len(p))
	keep := min(len(p), c.max-len(c.buf))
	if keep > 0 {
		c.buf = appendCapped(c.buf, p[:keep], c.max)
	}
	if keep < len(p) {
		c.truncated = true
	}
	return len(p), nil
}

// captureChunk is the read size of every capture.
const captureChunk = 32 << 10

// appendCapped appends p to buf, growing it by doubling but never past
// limit bytes of capacity: a capture at its cap holds the cap, not twice it.
func appendCapped(buf, p []byte, limit int) []byte {
	if need := len(buf) + len(p); need > cap(buf) {
		n := min(max(2*cap(buf), need, 4<<10), max(limit, need))
		grown := make([]byte, len(buf), n)
		copy(grown, buf)
		buf = grown
	}
	return append(buf, p...)
}

// textCapture keeps the tool's stdout or stderr: the longest prefix whose
// JSON encoding (as the envelope carries it, jsonsize) fits in max bytes,
// cut at a character boundary, and drains the rest. The cap bounds what
// the gateway holds and sends, not only what the tool wrote: a tool
// printing control bytes (six bytes each once encoded) keeps a sixth as
// many. The bytes kept are never more than max either.
type textCapture struct {
	// observe, if set, is told each run of bytes as measure keeps them
	// (Spec.Output). Set at hand-off, while the reader runs.
	observe   *outputHook
	max       int // cap on the encoded size, quotes excluded
	buf       []byte
	scanned   int // buf[:scanned] is measured; the rest is an incomplete character
	encoded   int // encoded size of buf[:scanned]
	truncated bool
	total     int64
}

// readFrom reads r to EOF or error.
func (c *textCapture) readFrom(r io.Reader) {
	chunk := make([]byte, captureChunk)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			c.write(chunk[:n])
		}
		if err != nil {
			c.measure(true)
			return
		}
	}
}

// Write keeps what fits (as write does) and reports everything as written,
// so a demultiplexer (demux.go) can copy a Deno jail's stdout frames in.
func (c *textCapture) Write(p []byte) (int, error) {
	c.write(p)
	return len(p), nil
}

func (c *textCapture) write(p []byte) {
	c.total += int64(len(p))
	if c.truncated {
		return
	}
	// Every byte costs at least one: more than room bytes cannot fit.
	room := c.scanned + (c.max - c.encoded) - len(c.buf)
	keep := min(len(p), max(room, 0))
	if keep < len(p) {
		c.truncated = true
	}
	c.buf = appendCapped(c.buf, p[:keep], c.max)
	c.measure(false)
}

// measure counts the characters not counted yet, cutting buf at the first
// that does not fit. At EOF an incomplete character is invalid UTF-8.
func (c *textCapture) measure(atEOF bool) {
	c.measureKept(atEOF)
	if c.observe != nil {
		c.observe.tell(c.buf[:c.scanned])
	}
}

func (c *textCapture) measureKept(atEOF bool) {
	for c.scanned < len(c.buf) {
		cost, size, complete := jsonsize.Next(c.buf[c.scanned:], atEOF)
		if !complete {
			return
		}
		if c.encoded+cost > c.max {
			c.buf = c.buf[:c.scanned]
			c.truncated = true
			return
		}
		c.encoded += cost
		c.scanned += size
	}
}

// outputHook passes what a textCapture keeps to a Spec.Output. The
// function is set at hand-off, while the capture's reader already runs.
type outputHook struct {
	stream string
	fn     atomic.Pointer[OutputFunc]
	told   int // kept[:told] was passed on (or had no one to go to); the reader's alone
}

// tell passes on what kept has beyond what was told already. Bytes kept
// before a function was set are not passed on (nothing of the tool's runs
// before the hand-off).
func (h *outputHook) tell(kept []byte) {
	fn := h.fn.Load()
	if fn != nil && len(kept) > h.told {
		for p := kept[h.told:]; len(p) > 0; {
			n := min(len(p), captureChunk)
			(*fn)(h.stream, p[:n])
			p = p[n:]
		}
	}
	h.told = len(kept)
}

// String is what the capture kept (call after readFrom returned).
func (c *textCapture) String() string { return string(c.buf[:c.scanned]) }

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
