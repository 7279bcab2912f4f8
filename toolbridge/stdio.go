package toolbridge

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdioPath is the PATH of a stdio server's environment.
const stdioPath = "PATH=/usr/local/bin:/usr/bin:/bin"

// stdioGrace is how long a stdio server may take to exit once its stdin is
// closed before its process group is killed.
const stdioGrace = 2 * time.Second

// startStdio launches s's command and returns the transport over its
// stdin/stdout and the function that stops it. Every line it writes (one
// JSON-RPC message) is bounded: past the cap the connection fails and
// s.tooLarge is set, so the call reports an oversized result.
func (s *server) startStdio() (mcp.Transport, func(), error) {
	argv := s.cfg.Command
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append([]string{stdioPath}, s.env...)
	cmd.Dir = "/"
	cmd.SysProcAttr = stdioProcAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	// stderr: /dev/null (a server may print what it was given).
	closeInheritedOnExec() // stdin, stdout and stderr only
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(stdioGrace):
			killGroup(cmd)
			<-exited
		}
	}
	max := s.cfg.MaxResultBytes + envelopeSlack
	t := &mcp.IOTransport{
		Reader:        &lineLimiter{rc: stdout, max: max, hit: &s.tooLarge},
		Writer:        stdin,
		MaxLineLength: int(2 * max), // ours binds first
	}
	return t, stop, nil
}

var errLineTooLong = errors.New("stdio tool server line over the result cap")

// lineLimiter fails a read once a line (one message) exceeds max bytes.
type lineLimiter struct {
	rc   io.ReadCloser
	max  int64
	cur  int64 // bytes of the current line so far
	hit  *atomic.Bool
	dead bool
}

func (l *lineLimiter) Read(p []byte) (int, error) {
	if l.dead {
		return 0, errLineTooLong
	}
	n, err := l.rc.Read(p)
	for rest := p[:n]; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			l.cur += int64(len(rest))
			break
		}
		l.cur += int64(i)
		if l.cur > l.max {
			break
		}
		l.cur = 0
		rest = rest[i+1:]
	}
	if l.cur > l.max {
		l.dead = true
		l.hit.Store(true)
		return 0, errLineTooLong
	}
	return n, err
}

func (l *lineLimiter) Close() error { return l.rc.Close() }
