package jsonsize

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// stdEncode is what the gateway's encoder writes for s.
func stdEncode(t testing.TB, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// nextLen sums Next over s as a stream cut into pieces of at most step bytes.
func nextLen(s string, step int) int {
	n := 2
	var pending []byte
	in := []byte(s)
	for len(in) > 0 || len(pending) > 0 {
		k := min(step, len(in))
		pending = append(pending, in[:k]...)
		in = in[k:]
		atEOF := len(in) == 0
		for len(pending) > 0 {
			c, size, ok := Next(pending, atEOF)
			if !ok {
				break
			}
			n += c
			pending = pending[size:]
		}
	}
	return n
}

func check(t *testing.T, s string) {
	t.Helper()
	want := stdEncode(t, s)
	if got := AppendString(nil, s); !bytes.Equal(got, want) {
		t.Fatalf("AppendString(%q) = %q, encoding/json writes %q", s, got, want)
	}
	if got := StringLen(s); got != len(want) {
		t.Fatalf("StringLen(%q) = %d, encoding/json writes %d bytes", s, got, len(want))
	}
	for _, step := range []int{1, 2, 3, 7, 1 << 20} {
		if got := nextLen(s, step); got != len(want) {
			t.Fatalf("Next over %q in pieces of %d: %d, encoding/json writes %d bytes", s, step, got, len(want))
		}
	}
}

func TestEncodedSizeMatchesEncodingJSON(t *testing.T) {
	cases := []struct{ name, s string }{
		{"empty", ""},
		{"plain", "hello, world"},
		{"html is not escaped", "<a href='x'>&amp;</a>"},
		{"quotes and backslashes", `"\"`},
		{"short escapes", "\b\f\n\r\t"},
		{"control bytes", "\x00\x01\x1f\x7f"},
		{"utf-8", "héllo, 世界, 🎉"},
		{"line separators", "a\u2028b\u2029c"},
		{"invalid utf-8", "\xff\xfe\xc3\x28\xe2\x82"},
		{"truncated sequence at the end", "ok\xf0\x9f\x8e"},
		{"surrogate half", "\xed\xa0\x80"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { check(t, c.s) })
	}
}

func TestEncodedSizeOfRandomBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("a<\"\\\n\x01\x7f\xc3\xa9\xe2\x80\xa8\xf0\x9f\x8e\x89\xff")
	for range 2000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			if rng.IntN(2) == 0 {
				b[i] = byte(rng.IntN(256))
			} else {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			}
		}
		check(t, string(b))
	}
}

func FuzzEncodedSize(f *testing.F) {
	f.Add("\x01<\xff\u2028é")
	f.Fuzz(func(t *testing.T, s string) { check(t, s) })
}

func TestAStringWrittenInPiecesIsWrittenTheSame(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte("a\x01\xc3\xa9\xe2\x80\xa8\xf0\x9f\x8e\x89\xff\xe2\x82")
	for range 2000 {
		b := make([]byte, rng.IntN(64))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		s := string(b)
		step := 1 + rng.IntN(7)
		var got []byte
		for i := 0; i < len(s); {
			j := CutAt(s, i+step)
			if j <= i {
				t.Fatalf("CutAt(%q, %d) = %d: no progress", s, i+step, j)
			}
			got = AppendStringContent(got, s[i:j])
			i = j
		}
		want := AppendString(nil, s)
		if string(want[1:len(want)-1]) != string(got) {
			t.Fatalf("%q in pieces of %d: %q, whole: %q", s, step, got, want)
		}
	}
}
