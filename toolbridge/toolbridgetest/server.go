// Package toolbridgetest starts real MCP tool servers (official Go SDK,
// streamable HTTP on loopback) for tests and benchmarks of code mode.
package toolbridgetest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Server is a running MCP tool server offering:
//
//	add(a, b)        → {"sum": a+b}
//	upper(s)         → {"text": upper-cased s}
//	charge(amount)   → {"charged": amount}
//	exec(cmd)        → {"ran": cmd}
//	slow(ms)         → {"slept_ms": ms} after sleeping ms (or until cancelled)
//	big(bytes)       → a text result of that many bytes
//	fail()           → a tool error "the tool failed on purpose"
type Server struct {
	URL string // the MCP endpoint
	MCP *mcp.Server

	token    string
	srv      *http.Server
	ln       net.Listener
	requests atomic.Int64 // HTTP requests received
	mu       sync.Mutex   // guards calls, headers
	calls    map[string]int
	headers  []string // every Authorization header value seen
}

// AddIn and friends are the tools' inputs and outputs.
type (
	AddIn struct {
		A float64 `json:"a" jsonschema:"first addend"`
		B float64 `json:"b" jsonschema:"second addend"`
	}
	AddOut struct {
		Sum float64 `json:"sum"`
	}
	UpperIn struct {
		S string `json:"s" jsonschema:"the text"`
	}
	UpperOut struct {
		Text string `json:"text"`
	}
	ChargeIn struct {
		Amount int `json:"amount"`
	}
	ChargeOut struct {
		Charged int `json:"charged"`
	}
	ExecIn struct {
		Cmd string `json:"cmd"`
	}
	ExecOut struct {
		Ran string `json:"ran"`
	}
	SlowIn struct {
		MS int `json:"ms"`
	}
	SlowOut struct {
		SleptMS int `json:"slept_ms"`
	}
	BigIn struct {
		Bytes int `json:"bytes"`
	}
)

// Start starts a server on 127.0.0.1 (a free port, or addr when given)
// that requires "Authorization: Bearer <token>" when token is not empty.
// It stops at the end of the test.
func Start(t testing.TB, token string, addr ...string) *Server {
	t.Helper()
	s, err := Listen(token, addr...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Listen is Start outside a test (execgate bench): the caller closes the
// server.
func Listen(token string, addr ...string) (*Server, error) {
	s := &Server{token: token, calls: map[string]int{}}
	s.MCP = s.newMCP()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.MCP }, nil)
	listen := "127.0.0.1:0"
	if len(addr) > 0 {
		listen = addr[0]
	}
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		if ln, err = net.Listen("tcp", listen); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // a port just released by a previous server
	}
	if err != nil {
		return nil, fmt.Errorf("listening for the MCP test server: %w", err)
	}
	s.ln = ln
	s.URL = "http://" + ln.Addr().String() + "/mcp"
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		s.mu.Lock()
		s.headers = append(s.headers, r.Header.Get("Authorization"))
		s.mu.Unlock()
		if s.token != "" && r.Header.Get("Authorization") != "Bearer "+s.token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// newMCP builds the MCP server with the tools listed on Server.
func (s *Server) newMCP() *mcp.Server {
	m := mcp.NewServer(&mcp.Implementation{Name: "toolbridgetest", Version: "1"}, nil)
	mcp.AddTool(m, &mcp.Tool{Name: "add", Description: "Add two numbers.\nReturns their sum."}, func(_ context.Context, _ *mcp.CallToolRequest, in AddIn) (*mcp.CallToolResult, AddOut, error) {
		s.count("add")
		return nil, AddOut{Sum: in.A + in.B}, nil
	})
	mcp.AddTool(m, &mcp.Tool{Name: "upper", Description: "Upper-case a text."}, func(_ context.Context, _ *mcp.CallToolRequest, in UpperIn) (*mcp.CallToolResult, UpperOut, error) {
		s.count("upper")
		return nil, UpperOut{Text: strings.ToUpper(in.S)}, nil
	})
	mcp.AddTool(m, &mcp.Tool{Name: "charge", Description: "Charge an amount."}, func(_ context.Context, _ *mcp.CallToolRequest, in ChargeIn) (*mcp.CallToolResult, ChargeOut, error) {
		s.count("charge")
		return nil, ChargeOut{Charged: in.Amount}, nil
	})
	mcp.AddTool(m, &mcp.Tool{Name: "exec", Description: "Run a command."}, func(_ context.Context, _ *mcp.CallToolRequest, in ExecIn) (*mcp.CallToolResult, ExecOut, error) {
		s.count("exec")
		return nil, ExecOut{Ran: in.Cmd}, nil
	})
	mcp.AddTool(m, &mcp.Tool{Name: "slow", Description: "Sleep a while."}, func(ctx context.Context, _ *mcp.CallToolRequest, in SlowIn) (*mcp.CallToolResult, SlowOut, error) {
		s.count("slow")
		select {
		case <-time.After(time.Duration(in.MS) * time.Millisecond):
		case <-ctx.Done():
		}
		return nil, SlowOut{SleptMS: in.MS}, nil
	})
	mcp.AddTool(m, &mcp.Tool{Name: "big", Description: "Return a large text."}, func(_ context.Context, _ *mcp.CallToolRequest, in BigIn) (*mcp.CallToolResult, any, error) {
		s.count("big")
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", in.Bytes)}}}, nil, nil
	})
	mcp.AddTool(m, &mcp.Tool{Name: "fail", Description: "Fail on purpose."}, func(_ context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		s.count("fail")
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the tool failed on purpose"}}}, nil, nil
	})
	return m
}

func (s *Server) count(tool string) {
	s.mu.Lock()
	s.calls[tool]++
	s.mu.Unlock()
}

// Calls is how many times tool was called.
func (s *Server) Calls(tool string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[tool]
}

// TotalCalls is how many tool calls the server answered.
func (s *Server) TotalCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		n += c
	}
	return n
}

// Requests is how many HTTP requests reached the server.
func (s *Server) Requests() int64 { return s.requests.Load() }

// Authorizations are the Authorization header values seen.
func (s *Server) Authorizations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.headers...)
}

// Addr is the server's listen address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server (idempotent).
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	_ = s.srv.Close()
}

// GreetIn is the input of the greet tool AddGreet adds.
type GreetIn struct {
	Name string `json:"name"`
}

// AddGreet adds a tool "greet" to a running server: its clients get
// notifications/tools/list_changed.
func AddGreet(s *Server) {
	mcp.AddTool(s.MCP, &mcp.Tool{Name: "greet", Description: "Greet someone."}, func(_ context.Context, _ *mcp.CallToolRequest, in GreetIn) (*mcp.CallToolResult, UpperOut, error) {
		s.count("greet")
		return nil, UpperOut{Text: "hello " + in.Name}, nil
	})
}

// serveEnv makes a test binary serve instead of testing (ServeIfChild).
const serveEnv = "EXECGATE_TOOLBRIDGETEST_SERVE"

// StdioEnv, set in a test binary's environment, makes ServeIfChild serve
// MCP over stdin/stdout (a stdio tool server launched by the gateway), with
// two more tools: environ() → the sorted names of its environment, fds() →
// its open descriptors.
const StdioEnv = "EXECGATE_TOOLBRIDGETEST_STDIO"

// EnvironOut is what environ returns.
type EnvironOut struct {
	Names []string `json:"names"`
}

// FDsOut is what fds returns: each open descriptor of the stdio server,
// "<fd> <target>" (the target of /proc/self/fd/<fd>).
type FDsOut struct {
	Targets []string `json:"targets"`
}

// openFDs lists the process's open descriptors and what they point at.
func openFDs() []string {
	names, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	var out []string
	for _, n := range names {
		target, err := os.Readlink("/proc/self/fd/" + n.Name())
		if err != nil {
			continue // the directory's own descriptor, closed by now
		}
		out = append(out, n.Name()+" "+target)
	}
	return out
}

// ServeIfChild turns a test binary started by StartProcess (or as a stdio
// server, with StdioEnv set) into the server: call it first in TestMain.
// Over HTTP it prints the URL and serves until its stdin closes; over stdio
// it serves until stdin closes. Then it exits.
func ServeIfChild() {
	if _, ok := os.LookupEnv(StdioEnv); ok {
		s := &Server{calls: map[string]int{}}
		m := s.newMCP()
		mcp.AddTool(m, &mcp.Tool{Name: "fds", Description: "What the process's open descriptors point at."}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, FDsOut, error) {
			return nil, FDsOut{Targets: openFDs()}, nil
		})
		mcp.AddTool(m, &mcp.Tool{Name: "environ", Description: "Names of the environment."}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, EnvironOut, error) {
			var names []string
			for _, kv := range os.Environ() {
				k, _, _ := strings.Cut(kv, "=")
				names = append(names, k)
			}
			slices.Sort(names)
			return nil, EnvironOut{Names: names}, nil
		})
		_ = m.Run(context.Background(), &mcp.StdioTransport{})
		os.Exit(0)
	}
	token, ok := os.LookupEnv(serveEnv)
	if !ok {
		return
	}
	s := Start(childTB{}, token)
	fmt.Println(s.URL)
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Close()
	os.Exit(0)
}

// StartProcess starts the server in a process of its own (the test binary
// again; its TestMain must call ServeIfChild), so that what the server
// allocates is not counted in the test's heap. It returns the MCP URL.
func StartProcess(t testing.TB, token string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+token)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the MCP server process did not start: %v", err)
	}
	return strings.TrimSpace(line)
}

// childTB is the testing.TB of a server process: failures end it.
type childTB struct{ testing.TB }

func (childTB) Helper()                        {}
func (childTB) Cleanup(func())                 {}
func (childTB) Fatalf(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...); os.Exit(2) }

// MarkIn is the input of the mark tool AddMark adds; MarkOut its output.
type MarkIn struct {
	Key  string `json:"key"`
	Hold bool   `json:"hold,omitempty"`
}

// MarkOut says how many times the key was marked, this call included.
type MarkOut struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// Marks counts the calls of the mark tool per key (a side effect a test
// can count exactly), and holds the calls that ask for it until Release.
type Marks struct {
	mu      sync.Mutex // guards n, release
	n       map[string]int
	release map[string]chan struct{}
}

// AddMark adds a tool "mark" (key, hold) to s: each call counts once
// under its key; with hold it answers only once the test calls Release
// for the key (or the call is cancelled).
func AddMark(s *Server) *Marks {
	m := &Marks{n: map[string]int{}, release: map[string]chan struct{}{}}
	mcp.AddTool(s.MCP, &mcp.Tool{Name: "mark", Description: "Record a side effect under a key."}, func(ctx context.Context, _ *mcp.CallToolRequest, in MarkIn) (*mcp.CallToolResult, MarkOut, error) {
		s.count("mark")
		m.mu.Lock()
		m.n[in.Key]++
		n, ch := m.n[in.Key], m.gateLocked(in.Key)
		m.mu.Unlock()
		if in.Hold {
			select {
			case <-ch:
			case <-ctx.Done():
			}
		}
		return nil, MarkOut{Key: in.Key, N: n}, nil
	})
	return m
}

func (m *Marks) gateLocked(key string) chan struct{} {
	ch, ok := m.release[key]
	if !ok {
		ch = make(chan struct{})
		m.release[key] = ch
	}
	return ch
}

// Count is how many times key was marked.
func (m *Marks) Count(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[key]
}

// Release answers the held calls of key, and those to come.
func (m *Marks) Release(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := m.gateLocked(key)
	select {
	case <-ch:
	default:
		close(ch)
	}
}
