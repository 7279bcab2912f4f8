package secrets

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

const token = "ghp_Tok3nValue-0123456789abcdefXYZ"

func masker(t *testing.T, vals ...string) *Masker {
	t.Helper()
	var vs []Value
	for i, v := range vals {
		vs = append(vs, NewValue(fmt.Sprintf("S%d", i), v))
	}
	return NewMasker(vs)
}

func TestMaskerString(t *testing.T) {
	pem := "-----BEGIN KEY-----\nMIIBVQIBADANBgkqhkiG9w0BAQEFAASC\nAT8wggE7AgEAAkEAq7BFUpkGp3+XQmPW\n-----END KEY-----"
	quoted := `pa"ss\wörd€🔑`
	m := masker(t, token, pem, quoted, "abc")
	py := func(v string) string { b, _ := json.Marshal(v); return string(b) } // Go's minimal escaping
	tests := []struct {
		name, in, want string
	}{
		{"the value is masked", "key=" + token + "!", "key=***!"},
		{"every occurrence is masked", token + token + " " + token, "****** ***"},
		{"text without a secret is unchanged", "nothing to see here", "nothing to see here"},
		{"a value shorter than MinMaskBytes is not masked", "abc abcd", "abc abcd"},
		{"a prefix of the value is not masked", token[:10], token[:10]},
		{"the whole multi-line value is one mask", "k:" + pem + ".", "k:***."},
		{"each line of a multi-line value is masked", "line " + strings.Split(pem, "\n")[1] + " end", "line *** end"},
		{"the base64 of the value is masked", base64.StdEncoding.EncodeToString([]byte(token)), "***g=="},                         // 34 bytes: the last character also holds what follows
		{"the URL-safe base64 of the value is masked", "x" + base64.RawURLEncoding.EncodeToString([]byte(quoted)) + "x", "x***x"}, // 18 bytes: whole groups
		{"the value inside a Basic credential is masked", "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("user:"+token)), ""},
		{"the JSON-escaped form (Go, JavaScript) is masked", `{"k":` + py(quoted) + `}`, `{"k":"***"}`},
		{"the ASCII-escaped form (Python's default) is masked", `{"k": "pa\"ss\\w\u00f6rd\u20ac\ud83d\udd11"}`, `{"k": "***"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := m.String(tt.in)
			if tt.want == "" { // only: no form of the value is left
				if !strings.Contains(got, Mask) || strings.Contains(got, base64.StdEncoding.EncodeToString([]byte(token))[4:12]) {
					t.Fatalf("String(%q) = %q; want the base64 of the value masked", tt.in, got)
				}
				return
			}
			if got != tt.want {
				t.Fatalf("String(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	var nilM *Masker
	if nilM.String(token) != token || nilM.JSON([]byte(`"x"`)) == nil {
		t.Error("a nil Masker changed its input")
	}
	if NewMasker([]Value{NewValue("A", "abc")}) != nil {
		t.Error("a Masker of values too short to mask is not nil")
	}
}

func TestMaskedTextIsNeverLonger(t *testing.T) {
	m := masker(t, "abcd", token)
	for _, in := range []string{"abcd", "abcdabcd", "xabcdx" + token, strings.Repeat("abcd", 1000)} {
		if out := m.String(in); len(out) > len(in) {
			t.Errorf("String(%q) = %q is longer", in, out)
		}
	}
}

func TestMaskerJSON(t *testing.T) {
	m := masker(t, token, "pässwörd")
	tests := []struct {
		name, in, want string
	}{
		{"a string holding the value is masked", `{"a":"x` + token + `y","b":[1,2.50,true,null]}`, `{"a":"x***y","b":[1,2.50,true,null]}`},
		{"an escaped form is decoded first", `{"b": 1, "a": "p\u00e4ssw\u00f6rd"}`, `{"b": 1, "a": "***"}`},
		{"a key is masked", `{"` + token + `":1}`, `{"***":1}`},
		{"formatting and key order are kept", "{\n  \"z\": \"" + token + "\",\n  \"a\": \"ok\"\n}", "{\n  \"z\": \"***\",\n  \"a\": \"ok\"\n}"},
		{"HTML characters are kept", `["<b>&` + token + `</b>"]`, `["<b>&***</b>"]`},
		{"a result without the value is unchanged", `{"a":"b\n"}`, `{"a":"b\n"}`},
		{"a value split over two strings is not found (documented)", `["` + token[:10] + `","` + token[10:] + `"]`, `["` + token[:10] + `","` + token[10:] + `"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := m.JSON([]byte(tt.in))
			if string(got) != tt.want {
				t.Fatalf("JSON(%s) = %s, want %s", tt.in, got, tt.want)
			}
			if !json.Valid(got) {
				t.Fatalf("JSON(%s) = %s is not JSON", tt.in, got)
			}
		})
	}
	in := []byte(`{"a":"nothing"}`)
	if out := m.JSON(in); &out[0] != &in[0] {
		t.Error("JSON copied a result it did not change")
	}
}

// TestStreamMasksLikeString: whatever the chunking, a Stream passes on
// exactly what String makes of the whole text, in chunks of at most
// MaxChunk whole characters.
func TestStreamMasksLikeString(t *testing.T) {
	vals := []string{token, "pässwörd", "-----BEGIN-----\nline-two-of-it\n-----END-----", "abcabcabd"}
	m := masker(t, vals...)
	pieces := append([]string{"a", "b", "c", "ab", "é", "€", "\n", "x", token[:7], token[7:], "pä", "sswö", "rd", base64.StdEncoding.EncodeToString([]byte(token))}, vals...)
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 2000; iter++ {
		var b strings.Builder
		for n := rng.IntN(40); n > 0; n-- {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		text := b.String()
		var got strings.Builder
		st := m.Stream(func(stream string, p []byte) {
			if stream != "stdout" {
				t.Fatalf("stream %q", stream)
			}
			if len(p) > MaxChunk || !utf8.Valid(p) {
				t.Fatalf("chunk of %d bytes, valid UTF-8 %v", len(p), utf8.Valid(p))
			}
			got.Write(p)
		})
		// Chunks cut at character starts, as the capture passes them.
		for rest := text; rest != ""; {
			n := min(len(rest), 1+rng.IntN(12))
			for n < len(rest) && !utf8.RuneStart(rest[n]) {
				n++
			}
			st.Write("stdout", []byte(rest[:n]))
			rest = rest[n:]
		}
		st.Flush()
		if want := m.String(text); got.String() != want {
			t.Fatalf("text %q:\nstream %q\nString %q", text, got.String(), want)
		}
	}
}

func TestStreamHoldsBackOnlyWhatAMatchMayStartIn(t *testing.T) {
	m := masker(t, token)
	var got []string
	st := m.Stream(func(stream string, p []byte) {
		if stream == "stdout" {
			got = append(got, string(p))
		}
	})
	st.Write("stdout", []byte("progress 10%\n"))
	if len(got) != 1 || got[0] != "progress 10%\n" {
		t.Fatalf("text that cannot start a secret was held back: %q", got)
	}
	st.Write("stdout", []byte("half: "+token[:12]))
	if strings.Join(got, "") != "progress 10%\nhalf: " {
		t.Fatalf("after half a secret: %q", got)
	}
	st.Write("stderr", []byte("other stream"))
	st.Write("stdout", []byte(token[12:]+" done\n"))
	st.Flush()
	if all := strings.Join(got, ""); strings.Contains(all, token[:12]) || !strings.Contains(all, "half: *** done\n") {
		t.Fatalf("a secret written in two halves: %q", all)
	}
}

func TestStreamSplitsLargeChunks(t *testing.T) {
	m := masker(t, token)
	var sizes []int
	st := m.Stream(func(_ string, p []byte) { sizes = append(sizes, len(p)) })
	st.Write("stdout", []byte(strings.Repeat("é", MaxChunk)))
	st.Flush()
	total := 0
	for _, n := range sizes {
		if n > MaxChunk {
			t.Fatalf("a chunk of %d bytes", n)
		}
		total += n
	}
	if total != 2*MaxChunk {
		t.Fatalf("passed on %d bytes, want %d", total, 2*MaxChunk)
	}
	if (*Masker)(nil).Stream(func(string, []byte) {}) != nil {
		t.Error("a nil Masker's Stream is not nil")
	}
}

func BenchmarkMaskerStringNoMatch(b *testing.B) {
	m := NewMasker([]Value{NewValue("A", token), NewValue("B", "pässwörd")})
	text := strings.Repeat("an ordinary line of tool output 0123456789\n", 1<<14) // 704 KiB
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		_ = m.String(text)
	}
}

func TestMaskerBytes(t *testing.T) {
	m := masker(t, token)
	csv := []byte("name,key\nprod," + token + "\n")
	if got := string(m.Bytes(csv)); got != "name,key\nprod,***\n" {
		t.Errorf("Bytes = %q", got)
	}
	png := []byte{0x89, 'P', 'N', 'G', 0, 1, 2}
	if out := m.Bytes(png); &out[0] != &png[0] {
		t.Error("Bytes copied content without a match")
	}
}
