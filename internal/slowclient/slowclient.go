// Package slowclient is the client of issue #23 §1 and §6, for `execgate
// bench` and the tests: HTTP requests whose responses are never read past
// their header, over loopback connections with the smallest receive buffer
// the kernel allows (so the server's writes block after a few KiB instead
// of filling megabytes of socket buffers), and the resident memory of the
// server they stall, read from /proc.
package slowclient

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The tools whose executions these clients read.
const (
	// BigResultSource writes args["bytes"] bytes to stdout and returns a
	// string as long: with bytes just under the platform's 16 MiB output
	// cap, an envelope of about twice that.
	BigResultSource = `import os
def run(args, context):
    os.write(1, b"y" * args["bytes"])
    return "x" * args["bytes"]
`
	// BigResultBytes is args["bytes"] of BigResultSource for a ~31 MiB
	// envelope.
	BigResultBytes = 15<<20 + 512<<10
	// TrickleSource writes 4 KiB of control bytes (24 KiB once encoded)
	// every 80 ms for args["seconds"]: live output for a minute within the
	// 16 MiB cap.
	TrickleSource = `import os, time
def run(args, context):
    block = b"\x01" * 4096
    end = time.time() + args["seconds"]
    while time.time() < end:
        os.write(1, block)
        time.sleep(0.08)
    return "trickled"
`
)

// Request is what each connection sends.
type Request struct {
	Method string
	Path   string // with the query
	Header http.Header
}

// Conn is one request whose response head has been read and whose body is
// left unread.
type Conn struct {
	// Response is the head; its Body must not be read (use Body).
	Response *http.Response
	conn     net.Conn
	br       *bufio.Reader
}

// recvBuffer is the receive buffer asked for (the kernel doubles it and
// applies its minimum).
const recvBuffer = 1024

// Open connects to addr, sends r and reads the response's status line and
// header (the server has then begun its answer), within ctx.
func Open(ctx context.Context, addr string, r Request) (*Conn, error) {
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, recvBuffer)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", r.Method, r.Path, addr)
	_ = r.Header.Write(&b)
	b.WriteString("\r\n")
	req, _ := http.NewRequest(r.Method, "http://"+addr+r.Path, nil)
	br := bufio.NewReaderSize(nc, 512)
	if _, err := nc.Write(b.Bytes()); err != nil {
		nc.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return &Conn{Response: resp, conn: nc, br: br}, nil
}

// OpenMany opens n connections sending r, parallel at a time. On an error
// the ones opened are closed.
func OpenMany(ctx context.Context, addr string, r Request, n, parallel int) ([]*Conn, error) {
	conns := make([]*Conn, n)
	errs := make([]error, n)
	sem := make(chan struct{}, max(1, parallel))
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			conns[i], errs[i] = Open(ctx, addr, r)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			CloseAll(conns)
			return nil, fmt.Errorf("connection %d of %d: %w", i+1, n, err)
		}
	}
	return conns, nil
}

// Body reads at most limit bytes of the body (a refusal's JSON).
func (c *Conn) Body(limit int64) ([]byte, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	return io.ReadAll(io.LimitReader(c.Response.Body, limit))
}

// Close closes the connection.
func (c *Conn) Close() error { return c.conn.Close() }

// CloseAll closes every non-nil conn.
func CloseAll(conns []*Conn) {
	for _, c := range conns {
		if c != nil {
			_ = c.Close()
		}
	}
}

// RSSKB is the resident set (VmRSS) of process pid in KiB; 0 when it is
// gone.
func RSSKB(pid int) int64 {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// SettledRSSKB waits (at most 10 s) until RSSKB(pid) stops falling — a
// server returning a finished burst's memory to the OS — and returns it.
func SettledRSSKB(pid int) int64 {
	last := RSSKB(pid)
	for range 20 {
		time.Sleep(500 * time.Millisecond) // a sampling interval
		now := RSSKB(pid)
		if now >= last-1024 {
			return min(now, last)
		}
		last = now
	}
	return last
}

// PeakRSSKB samples RSSKB(pid) every 20 ms for d and returns the highest.
func PeakRSSKB(pid int, d time.Duration) int64 {
	var peak int64
	end := time.Now().Add(d)
	for {
		peak = max(peak, RSSKB(pid))
		if time.Now().After(end) {
			return peak
		}
		time.Sleep(20 * time.Millisecond) // a sampling interval, not synchronisation
	}
}
