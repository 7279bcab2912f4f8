// Package testenv starts the real components integration tests run
// against (redis-server, nsjail, …) and skips, with a message saying what
// to install, only where the host truly cannot provide them.
package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RedisServer is a real redis-server bound to 127.0.0.1 on a free port,
// without persistence, in a temporary directory. It is killed on test
// cleanup. Kill and Restart simulate outages for failure tests.
type RedisServer struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	args []string // extra redis-server arguments

	mu   sync.Mutex // guards cmd, done and log
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	log  *SyncBuffer
}

const redisStartTimeout = 10 * time.Second

// Redis starts a redis-server for t. extraArgs are appended to the command
// line (e.g. "--cluster-enabled", "yes"). It skips only when redis-server is
// not installed (Debian: apt-get install redis-server).
func Redis(t testing.TB, extraArgs ...string) *RedisServer {
	t.Helper()
	bin, err := findRedis()
	if err != nil {
		SkipUnlessCI(t, "redis-server not installed (apt-get install redis-server): %v", err)
	}
	s := &RedisServer{t: t, bin: bin, dir: t.TempDir(), args: extraArgs}
	t.Cleanup(s.Kill)
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redis: finding a free port: %v", err)
		}
		s.port = port
		if lastErr = s.start(); lastErr == nil {
			return s
		}
		// Another process may have taken the port between our probe and
		// redis binding it: pick another.
	}
	t.Fatalf("redis: starting redis-server: %v", lastErr)
	return nil
}

func findRedis() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	const debian = "/usr/bin/redis-server"
	if _, err := os.Stat(debian); err != nil {
		return "", fmt.Errorf("not on PATH and not at %s", debian)
	}
	return debian, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs redis-server on s.port and waits until it answers PING.
func (s *RedisServer) start() error {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", "",
	}
	args = append(args, s.args...)
	cmd := exec.Command(s.bin, args...)
	log := &SyncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("running %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done, s.log = cmd, done, log
	s.mu.Unlock()

	deadline := time.Now().Add(redisStartTimeout)
	for {
		select {
		case <-done:
			return fmt.Errorf("redis-server exited during start-up: %s", strings.TrimSpace(log.String()))
		default:
		}
		if err := ping(s.Addr()); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server did not answer PING within %s: %v; log: %s", redisStartTimeout, err, log.String())
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}

// ping sends one inline PING and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("unexpected PING reply %q", line)
	}
	return nil
}

// Addr is host:port.
func (s *RedisServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is redis://127.0.0.1:port/0.
func (s *RedisServer) URL() string { return "redis://" + s.Addr() + "/0" }

// Dir is the server's working directory.
func (s *RedisServer) Dir() string { return filepath.Clean(s.dir) }

// Kill stops the server with SIGKILL (an outage, not a shutdown) and waits
// for it to exit. Killing a stopped server does nothing.
func (s *RedisServer) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.t.Errorf("redis: killing pid %d: %v", cmd.Process.Pid, err)
	}
	<-done
}

// Restart starts the server again on the same port (empty: no persistence)
// and waits until it answers. It kills a running server first.
func (s *RedisServer) Restart() {
	s.t.Helper()
	s.Kill()
	deadline := time.Now().Add(redisStartTimeout)
	for {
		err := s.start()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis: restarting on port %d: %v", s.port, err)
		}
		time.Sleep(50 * time.Millisecond) // port still held: poll until free
	}
}

// Log returns what the running (or last) server printed.
func (s *RedisServer) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return ""
	}
	return s.log.String()
}
