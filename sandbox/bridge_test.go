package sandbox

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"
)

type bigBridge struct{ noBridge }

func (bigBridge) Call(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	return json.Marshal(strings.Repeat("x", maxBridgeAnswer))
}

func roundTrip(t *testing.T, jail net.Conn, req string) bridgeAnswer {
	t.Helper()
	if err := writeFrame(jail, []byte(req)); err != nil {
		t.Fatal(err)
	}
	frame, err := readFrame(jail, maxBridgeAnswer)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	var a bridgeAnswer
	if err := json.Unmarshal(frame, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestBridgeServerCapsAnswersAndRefusesOtherVersions(t *testing.T) {
	jail, runner := net.Pipe()
	s := serveBridge(context.Background(), connChannel{runner}, bigBridge{}, slog.Default())
	defer s.stop()

	a := roundTrip(t, jail, `{"v":1,"id":7,"op":"run","name":"big"}`)
	if a.ID != 7 || a.Error == nil || a.Error.Type != ErrToolFailed || !strings.Contains(a.Error.Message, "cap") {
		t.Errorf("an answer over the cap: %+v", a)
	}
	a = roundTrip(t, jail, `{"v":1,"id":8,"op":"describe","name":"nope"}`)
	if a.ID != 8 || a.Error == nil || a.Error.Type != ErrToolDenied {
		t.Errorf("describe without a bridge: %+v", a)
	}
	a = roundTrip(t, jail, `{"v":2,"id":9,"op":"run","name":"big"}`)
	if a.Error == nil || a.Error.Type != ErrToolUnavailable || !strings.Contains(a.Error.Message, "protocol 1") {
		t.Errorf("a version 2 request: %+v", a)
	}
	if _, err := readFrame(jail, maxBridgeAnswer); err == nil {
		t.Error("the channel stayed open after a version mismatch")
	}
}
