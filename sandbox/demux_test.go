package sandbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"
)

func frameBytes(kind byte, payload string) []byte {
	b := make([]byte, frameHeadLen, frameHeadLen+len(payload))
	b[0] = kind
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

func TestDemuxSplitsStdoutFromTheEnvelope(t *testing.T) {
	env := `{"protocol_version":1,"status":"ok","result":1}`
	for _, tc := range []struct {
		name        string
		stream      []byte
		stdout      string
		envelope    string
		broken      bool
		stdoutTrunc bool
	}{
		{"frames in order", bytes.Join([][]byte{frameBytes(frameStdout, "hi\n"), frameBytes(frameStdout, "there\n"), frameBytes(frameEnvelope, env)}, nil), "hi\nthere\n", env, false, false},
		{"no envelope", frameBytes(frameStdout, "only output"), "only output", "", false, false},
		{"raw bytes break the framing and drop the envelope", append(frameBytes(frameEnvelope, env), "raw write"...), "raw write", "", true, false},
		{"a second envelope breaks the framing and counts as stdout", append(frameBytes(frameEnvelope, env), frameBytes(frameEnvelope, env)...), string(frameBytes(frameEnvelope, env)), "", true, false},
		{"a torn header at the end", append(frameBytes(frameStdout, "a"), 1, 0), "a\x01\x00", "", true, false},
		{"stdout over the cap is truncated", frameBytes(frameStdout, "0123456789"), "01234", "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := textCapture{max: 5}
			if !tc.stdoutTrunc {
				out.max = 1 << 20
			}
			f := framedChannel{envelope: capture{max: 1 << 20}}
			f.demux(bytes.NewReader(tc.stream), &out)
			if got := out.String(); got != tc.stdout {
				t.Errorf("stdout %q, want %q", got, tc.stdout)
			}
			if got := string(f.envelope.buf); got != tc.envelope {
				t.Errorf("envelope %q, want %q", got, tc.envelope)
			}
			if (f.broken != "") != tc.broken {
				t.Errorf("broken %q, want broken=%v", f.broken, tc.broken)
			}
			if out.truncated != tc.stdoutTrunc {
				t.Errorf("stdout truncated %v", out.truncated)
			}
		})
	}
}

func TestDenoBridgeFramesAreAnsweredOnStdinAndAnOversizedFrameEndsOnlyTheBridge(t *testing.T) {
	stdinR, stdinW := io.Pipe()
	ch := newStdioChannel(stdinW)
	fb, err := NewFixtureBridge(json.RawMessage(`{"a": 1, "b": [2]}`))
	if err != nil {
		t.Fatal(err)
	}
	s := serveBridge(context.Background(), ch, fb, slog.Default())
	defer s.stop()
	outR, outW := io.Pipe()
	f := framedChannel{envelope: capture{max: 1 << 20}, bridge: ch}
	out := textCapture{max: 1 << 20}
	done := make(chan struct{})
	go func() { f.demux(outR, &out); close(done) }()

	// Two pipelined requests, answered by id.
	go func() {
		_, _ = outW.Write(frameBytes(frameBridge, `{"v":1,"id":1,"op":"run","name":"a"}`))
		_, _ = outW.Write(frameBytes(frameStdout, "hi"))
		_, _ = outW.Write(frameBytes(frameBridge, `{"v":1,"id":2,"op":"run","name":"b"}`))
	}()
	got := map[int64]string{}
	for range 2 {
		frame, err := readFrame(stdinR, maxBridgeAnswer)
		if err != nil {
			t.Fatalf("reading an answer on stdin: %v", err)
		}
		var a bridgeAnswer
		if err := json.Unmarshal(frame, &a); err != nil {
			t.Fatal(err)
		}
		got[a.ID] = string(a.Result)
	}
	if got[1] != "1" || got[2] != "[2]" {
		t.Errorf("answers %v", got)
	}
	// A frame over the request cap: read away, the bridge ends (stdin
	// closed), stdout goes on.
	go func() {
		head := []byte{frameBridge, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(head[1:], maxBridgeRequest+1)
		_, _ = outW.Write(head)
		_, _ = outW.Write(make([]byte, maxBridgeRequest+1))
		_, _ = outW.Write(frameBytes(frameBridge, `{"v":1,"id":3,"op":"run","name":"a"}`))
		_, _ = outW.Write(frameBytes(frameStdout, " there"))
		outW.Close()
	}()
	if frame, err := readFrame(stdinR, maxBridgeAnswer); err != io.EOF {
		t.Errorf("after an oversized frame stdin gave %q, %v; want EOF", frame, err)
	}
	<-done
	if out.String() != "hi there" || f.broken != "" {
		t.Errorf("stdout %q, broken %q", out.String(), f.broken)
	}
	if calls := fb.ToolCalls(); len(calls) != 2 {
		t.Errorf("the bridge answered %d calls, want 2 (none after the oversized frame)", len(calls))
	}
}

func TestDenoBridgeQueueOverflowEndsTheBridge(t *testing.T) {
	stdinR, stdinW := io.Pipe()
	ch := newStdioChannel(stdinW)
	for range maxBridgeInflight {
		ch.push([]byte(`{}`))
	}
	select {
	case <-ch.ended:
		t.Fatalf("the bridge ended with %d queued requests (the harness may leave that many)", maxBridgeInflight)
	default:
	}
	ch.push([]byte(`{}`)) // one more than the harness may leave unanswered
	if _, err := ch.next(); err == nil || err == io.EOF {
		t.Errorf("next after an overflow: %v, want the violation", err)
	}
	eof := make(chan error, 1)
	go func() { _, err := stdinR.Read(make([]byte, 1)); eof <- err }()
	select {
	case err := <-eof:
		if err != io.EOF {
			t.Errorf("stdin after an overflow: %v, want EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("stdin is still open after an overflow")
	}
}

func TestDenoBridgeEndsWhenTheFramingBreaks(t *testing.T) {
	stdinR, stdinW := io.Pipe()
	f := framedChannel{envelope: capture{max: 1 << 20}, bridge: newStdioChannel(stdinW)}
	out := textCapture{max: 1 << 20}
	stream := append(frameBytes(frameStdout, "ok"), "raw bytes on fd 1"...)
	eof := make(chan error, 1)
	go func() { _, err := stdinR.Read(make([]byte, 1)); eof <- err }()
	f.demux(bytes.NewReader(stream), &out)
	if f.broken == "" {
		t.Fatal("raw bytes did not break the framing")
	}
	select {
	case err := <-eof:
		if err != io.EOF {
			t.Errorf("stdin after the framing broke: %v, want EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("stdin is still open after the framing broke")
	}
	if _, err := f.bridge.next(); err == nil || err == io.EOF {
		t.Errorf("next after the framing broke: %v, want the violation", err)
	}
}
