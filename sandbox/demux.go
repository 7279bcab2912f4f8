package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
)

// The Deno harness cannot open fd 3 or fd 5 (every Deno permission is
// denied), so it frames what it writes on stdout (execgate_harness.js):
//
//	frame = kind (1 byte) | length (uint32, big endian) | payload
//
// Kind frameStdout carries the tool's stdout, kind frameEnvelope the result
// envelope (once), kind frameBridge one tool bridge request (the JSON a
// Python tool writes on fd 5, bridge.go). demux splits the stream back:
// stdout payloads go to the jail's stdout capture (the same cap as a Python
// tool's stdout), the envelope to its own capture, bridge requests to the
// run's stdioChannel. Bytes that are not a frame (a tool that found a raw
// path to fd 1) end the framing: they and everything after them count as
// stdout, and any envelope is dropped, so the run is classified like a
// Python tool that wrote on its result fd (ToolError); the bridge ends too.
// The harness writes every frame itself, with a writer it took before the
// tool loaded; what the tool writes (console, Deno.stdout) is always the
// payload of a kind-1 frame, so a tool cannot forge a kind-3 frame.
const (
	frameStdout   = 1
	frameEnvelope = 2
	frameBridge   = 3
	frameHeadLen  = 5
)

// framedChannel is the demultiplexed stdout of a Deno jail.
type framedChannel struct {
	envelope capture
	// bridge receives the bridge request frames (nil: kind 3 is not a frame).
	bridge *stdioChannel
	// broken says why the framing ended early ("" if it did not).
	broken string
	// envelopeIn, when not nil, is closed once the envelope frame is in
	// (or stdout ended without one): level process ends a run with its
	// envelope (zygote.Output) rather than at the Deno process's exit.
	// whole, set before it is closed and never after, says the envelope
	// was whole then (not cut at its cap, valid JSON, the framing intact).
	envelopeIn chan struct{}
	whole      bool
	signalled  bool // envelopeIn is closed (demux's own)
}

// envelopeEnded closes envelopeIn once, recording whether the envelope is
// whole.
func (f *framedChannel) envelopeEnded() {
	if f.envelopeIn == nil || f.signalled {
		return
	}
	f.signalled = true
	f.whole = f.broken == "" && !f.envelope.truncated && json.Valid(f.envelope.buf)
	close(f.envelopeIn)
}

// demux reads r (the jail's stdout) to EOF, filling stdout and f.
func (f *framedChannel) demux(r io.Reader, stdout *textCapture) {
	defer stdout.measure(true)
	defer f.envelopeEnded()
	if f.bridge != nil {
		defer f.bridge.eof()
	}
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
		if err == io.EOF || (n == 0 && f.signalled && errors.Is(err, os.ErrClosed)) {
			// EOF, or a level-process run that ended with its envelope:
			// its stdout was closed here once drained (collectDrained).
			return
		}
		if err != nil {
			f.fail(fmt.Sprintf("a partial frame header at the end of stdout (%d bytes)", n))
			_, _ = stdout.Write(head[:n])
			return
		}
		kind, size := head[0], binary.BigEndian.Uint32(head[1:])
		if kind == frameBridge && f.bridge != nil {
			if err := f.bridgeFrame(r, size); err != nil {
				return
			}
			continue
		}
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
		if dst != stdout {
			f.envelopeEnded()
		}
	}
}

func (f *framedChannel) fail(why string) {
	if f.broken == "" {
		f.broken = why
	}
	f.envelope.buf = nil
	if f.bridge != nil {
		f.bridge.violate(errors.New("the harness framing ended: " + why))
	}
}

// bridgeFrame hands one bridge request of size bytes to the bridge. A frame
// over maxBridgeRequest is read away (never held) and ends the bridge; an
// error is stdout's (it ended inside the frame).
func (f *framedChannel) bridgeFrame(r io.Reader, size uint32) error {
	if int64(size) > maxBridgeRequest {
		f.bridge.violate(fmt.Errorf("bridge frame of %d bytes is over the %d-byte cap", size, maxBridgeRequest))
		_, err := io.CopyN(io.Discard, r, int64(size))
		return err
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(r, buf); err != nil {
		f.bridge.violate(errors.New("a bridge frame ended early"))
		return err
	}
	f.bridge.push(buf)
	return nil
}

// stdioChannel is a Deno jail's bridge channel (bridgeChannel): demux
// pushes the request frames, answers are written to the jail's stdin.
//
// demux never waits for the bridge: frames are queued up to
// maxBridgeInflight, which the harness never exceeds (it keeps at most
// max_inflight requests unanswered, and the server answers that many at
// once). A jail that overflows the queue broke the protocol: the bridge
// ends (ToolUnavailable inside), stdout keeps being read.
type stdioChannel struct {
	frames chan []byte
	stdin  io.WriteCloser

	mu    sync.Mutex    // guards err
	err   error         // why the channel ended (first reason)
	ended chan struct{} // closed once, when err is set
}

func newStdioChannel(stdin io.WriteCloser) *stdioChannel {
	return &stdioChannel{frames: make(chan []byte, maxBridgeInflight), stdin: stdin, ended: make(chan struct{})}
}

var _ bridgeChannel = (*stdioChannel)(nil)

// push queues one request frame (demux).
func (c *stdioChannel) push(b []byte) {
	select {
	case <-c.ended:
		return // ended: requests are read away
	default:
	}
	select {
	case c.frames <- b:
	default:
		c.violate(fmt.Errorf("more than %d bridge requests queued", maxBridgeInflight))
	}
}

// eof: the jail's stdout ended (the jail is gone).
func (c *stdioChannel) eof() { c.end(io.EOF) }

// violate ends the bridge for a protocol violation; the jail's stdin is
// closed, so the harness fails every pending and later call.
func (c *stdioChannel) violate(err error) {
	if c.end(err) {
		c.stdin.Close()
	}
}

func (c *stdioChannel) end(err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return false
	}
	c.err = err
	close(c.ended)
	return true
}

func (c *stdioChannel) next() ([]byte, error) {
	select {
	case b := <-c.frames:
		select {
		case <-c.ended:
			// Ended meanwhile: nothing more is answered.
		default:
			return b, nil
		}
	case <-c.ended:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return nil, c.err
}

func (c *stdioChannel) send(b []byte) error { return writeFrame(c.stdin, b) }

func (c *stdioChannel) close() {
	c.end(net.ErrClosed)
	c.stdin.Close()
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
