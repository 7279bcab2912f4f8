package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// FixtureBridge answers a test-mode run's tool requests from its fixtures
// (DESIGN §12.6): run returns the fixture's value, search and describe see
// the fixture names (with a schema that accepts any object). Nothing leaves
// the runner. The runner uses it for every test-mode run, whatever Bridge
// the Spec carries.
type FixtureBridge struct {
	tools map[string]json.RawMessage
	names []string // sorted

	mu    sync.Mutex // guards calls
	calls []ToolCall
}

// maxRecordedCalls bounds the calls a Bridge keeps for the envelope and the
// audit record; later calls are counted in the last entry's place only.
const maxRecordedCalls = 1000

// NewFixtureBridge returns the bridge for fixtures (a JSON object mapping a
// tool name to what a call returns; empty or null: no tools).
func NewFixtureBridge(fixtures json.RawMessage) (*FixtureBridge, error) {
	b := &FixtureBridge{tools: map[string]json.RawMessage{}}
	if len(fixtures) > 0 && string(fixtures) != "null" {
		if err := json.Unmarshal(fixtures, &b.tools); err != nil {
			return nil, fmt.Errorf("tool fixtures: %w", err)
		}
	}
	for name := range b.tools {
		b.names = append(b.names, name)
	}
	sort.Strings(b.names)
	return b, nil
}

// Search lists the fixtures whose name matches query.
func (b *FixtureBridge) Search(_ context.Context, query string, limit int) ([]ToolInfo, error) {
	var out []ToolInfo
	for _, n := range b.names {
		t := ToolInfo{Name: n, Description: "test fixture"}
		if ToolMatches(query, t) && len(out) < limit {
			out = append(out, t)
		}
	}
	return out, nil
}

// Describe describes a fixture: any object is accepted.
func (b *FixtureBridge) Describe(_ context.Context, name string) (ToolInfo, error) {
	if _, ok := b.tools[name]; !ok {
		return ToolInfo{}, b.missing(name)
	}
	return ToolInfo{Name: name, Description: "test fixture", InputSchema: json.RawMessage(`{"type":"object"}`)}, nil
}

// Call returns the fixture of name.
func (b *FixtureBridge) Call(_ context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	v, ok := b.tools[name]
	c := ToolCall{Tool: name, Server: "fixture", Outcome: "ok", BytesIn: int64(len(args)), BytesOut: int64(len(v)), ArgsSHA256: digest(args)}
	var err error
	if !ok {
		err = b.missing(name)
		c.Outcome, c.Reason, c.BytesOut = ErrToolDenied, "no fixture", 0
	}
	b.mu.Lock()
	if len(b.calls) < maxRecordedCalls {
		b.calls = append(b.calls, c)
	}
	b.mu.Unlock()
	return v, err
}

// ToolCalls returns the calls made so far.
func (b *FixtureBridge) ToolCalls() []ToolCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]ToolCall(nil), b.calls...)
}

func (b *FixtureBridge) missing(name string) error {
	return &ToolError{Type: ErrToolDenied, Message: fmt.Sprintf("tool %q has no fixture in this test run", name)}
}

var (
	_ Bridge           = (*FixtureBridge)(nil)
	_ ToolCallRecorder = (*FixtureBridge)(nil)
)

// ToolMatches reports whether t matches a search query: every word of the
// query (case-insensitive) appears in the tool's name or description. An
// empty query matches every tool.
func ToolMatches(query string, t ToolInfo) bool {
	hay := strings.ToLower(t.Name + " " + t.Description)
	for _, w := range strings.Fields(strings.ToLower(query)) {
		if !strings.Contains(hay, w) {
			return false
		}
	}
	return true
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
