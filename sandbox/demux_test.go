package sandbox

import (
	"bytes"
	"encoding/binary"
	"testing"
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
