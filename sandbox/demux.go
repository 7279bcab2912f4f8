package sandbox

import (
	"encoding/binary"
	"fmt"
	"io"
)

// The Deno harness cannot open fd 3 (every Deno permission is denied), so it
// frames what it writes on stdout (execgate_harness.js):
//
//	frame = kind (1 byte) | length (uint32, big endian) | payload
//
// Kind frameStdout carries the tool's stdout, kind frameEnvelope the result
// envelope (once). demux splits the stream back: stdout payloads go to the
// jail's stdout capture (the same cap as a Python tool's stdout), the
// envelope to its own capture. Bytes that are not a frame (a tool that
// found a raw path to fd 1) end the framing: they and everything after
// them count as stdout, and any envelope is dropped, so the run is
// classified like a Python tool that wrote on its result fd (ToolError).
const (
	frameStdout   = 1
	frameEnvelope = 2
	frameHeadLen  = 5
)

// framedChannel is the demultiplexed stdout of a Deno jail.
type framedChannel struct {
	envelope capture
	// broken says why the framing ended early ("" if it did not).
	broken string
}

// demux reads r (the jail's stdout) to EOF, filling stdout and f.
func (f *framedChannel) demux(r io.Reader, stdout *textCapture) {
	defer stdout.measure(true)
	head := make([]byte, frameHeadLen)
	buf := make([]byte, 32<<10)
	raw := func() {
		for {
			n, err := r.Read(buf)
			if n > 0 {
				_, _ = stdout.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}
	for {
		n, err := io.ReadFull(r, head)
		if err == io.EOF {
			return
		}
		if err != nil {
			f.fail(fmt.Sprintf("a partial frame header at the end of stdout (%d bytes)", n))
			_, _ = stdout.Write(head[:n])
			return
		}
		kind, size := head[0], binary.BigEndian.Uint32(head[1:])
		var dst io.Writer
		switch {
		case kind == frameStdout:
			dst = stdout
		case kind == frameEnvelope && f.envelope.total == 0 && f.broken == "":
			dst = &f.envelope
			if int64(size) > int64(f.envelope.max) {
				// Keep the cap's worth (truncated), read the rest away.
				f.envelope.truncated = true
			}
		default:
			f.fail(fmt.Sprintf("bytes on stdout that are not a harness frame (kind %d)", kind))
			_, _ = stdout.Write(head)
			raw()
			return
		}
		if _, err := io.CopyN(dst, r, int64(size)); err != nil {
			if dst != stdout {
				f.fail("the envelope frame ended early")
			}
			return
		}
	}
}

func (f *framedChannel) fail(why string) {
	if f.broken == "" {
		f.broken = why
	}
	f.envelope.buf = nil
}

// envelopeBytes is the Deno jail's envelope: the launcher's own (fd 3,
// written before Deno starts: a protocol mismatch, a validate result) or
// else the harness's framed one.
func (j *jail) envelopeBytes() ([]byte, bool) {
	if j.framed == nil || len(j.envelope.buf) > 0 || j.envelope.truncated {
		return j.envelope.buf, j.envelope.truncated
	}
	if j.framed.broken != "" {
		return nil, false
	}
	return j.framed.envelope.buf, j.framed.envelope.truncated
}
