package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/execgate/execgate/internal/jsonsize"
)

// What the Masker masks (docs/concepts/secrets.md says the same): for each
// value of at least MinMaskBytes,
//
//   - the value itself, and each of its lines (a multi-line value, such as
//     a PEM key, printed line by line);
//   - its JSON-escaped forms, as Python's json.dumps writes them by default
//     (non-ASCII as \uXXXX) and as JavaScript and Go write them (only '"',
//     '\' and line breaks escaped): a tool that prints JSON holding it;
//   - its base64, standard and URL-safe alphabets, at each of the three
//     alignments it can have inside a longer base64 text (an
//     "Authorization: Basic" header of user:value), each trimmed to the
//     characters that depend on the value alone (GitHub Actions masks
//     these too), when at least 6 characters long;
//
// and, in a run's JSON result, every string whose decoded text holds one
// of these (whatever escaping the tool's JSON encoder chose).
//
// Matching is exact and case-sensitive, leftmost first and longest first
// at a position, without overlaps (as strings.Replacer and GitHub Actions'
// masks do); each match becomes Mask. Masked text is never longer than the
// original (every form is longer than Mask), so the output caps hold.
//
// What it cannot do: a tool that transforms a secret (reverses it, splits
// it over two strings of its result, sends it over the egress it is
// allowed) is not stopped by masking. The grant is the boundary: a secret
// goes only to runs whose policy grants it, and masking keeps it out of
// what those runs send back by accident.

// Masker replaces secret values, and their common forms, with Mask. A nil
// *Masker masks nothing. It is immutable and safe for concurrent use.
type Masker struct {
	// needles are the forms masked, longest first (equal lengths in
	// lexical order, so the order is deterministic).
	needles []string
	// fail[i] is needles[i]'s KMP failure function (see hold).
	fail [][]int32
	// first marks the bytes some needle starts with.
	first [256]bool
	// maxLen is the longest needle's length.
	maxLen int
}

// NewMasker is the masker of vals; nil when none of them is long enough
// to mask (see MinMaskBytes).
func NewMasker(vals []Value) *Masker {
	seen := map[string]bool{}
	var needles []string
	add := func(s string, min int) {
		if len(s) >= min && !seen[s] {
			seen[s] = true
			needles = append(needles, s)
		}
	}
	for _, v := range vals {
		if len(v.value) < MinMaskBytes {
			continue
		}
		for _, f := range Forms(v.value) {
			add(f, MinMaskBytes)
		}
		for _, f := range base64Forms(v.value) {
			add(f, minFormBytes)
		}
	}
	if len(needles) == 0 {
		return nil
	}
	sort.Slice(needles, func(i, j int) bool {
		if len(needles[i]) != len(needles[j]) {
			return len(needles[i]) > len(needles[j])
		}
		return needles[i] < needles[j]
	})
	m := &Masker{needles: needles, fail: make([][]int32, len(needles)), maxLen: len(needles[0])}
	for i, n := range needles {
		m.first[n[0]] = true
		m.fail[i] = failure(n)
	}
	return m
}

// Forms are the textual forms of v that are masked (besides base64): v,
// its lines and its JSON-escaped forms, duplicates left in.
func Forms(v string) []string {
	out := []string{v, jsonEscape(v, false), jsonEscape(v, true)}
	if strings.ContainsAny(v, "\r\n") {
		out = append(out, strings.FieldsFunc(v, func(r rune) bool { return r == '\n' || r == '\r' })...)
	}
	return out
}

// jsonEscape is v as the inside of a JSON string literal: only '"', '\'
// and control characters escaped (JavaScript, Go without HTML escaping,
// Python with ensure_ascii=False), or, with ascii, every non-ASCII
// character too, as \uXXXX with surrogate pairs (Python's default).
// Hexadecimal digits are lower-case, as all three write them.
func jsonEscape(v string, ascii bool) string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	u := func(r rune) {
		b.WriteString(`\u`)
		for shift := 12; shift >= 0; shift -= 4 {
			b.WriteByte(hex[(r>>shift)&0xf])
		}
	}
	for _, r := range v {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20:
			u(r)
		case ascii && r > 0x7e && r <= 0xffff:
			u(r)
		case ascii && r > 0xffff:
			r -= 0x10000
			u(0xd800 + (r>>10)&0x3ff)
			u(0xdc00 + r&0x3ff)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// base64Forms are v's base64 in both alphabets at the three alignments,
// each trimmed to the characters that depend on v alone.
func base64Forms(v string) []string {
	var out []string
	for shift := 0; shift < 3; shift++ {
		b := make([]byte, shift+len(v))
		copy(b[shift:], v)
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			s := enc.EncodeToString(b)
			// The first characters mix the bytes before v (2 for one
			// byte before, 3 for two); the last one, when v ends inside
			// a 3-byte group, mixes what follows.
			head := map[int]int{0: 0, 1: 2, 2: 3}[shift]
			tail := 0
			if (shift+len(v))%3 != 0 {
				tail = 1
			}
			if len(s) > head+tail {
				out = append(out, s[head:len(s)-tail])
			}
		}
	}
	return out
}

// failure is n's KMP failure function: fail[i] is the length of the
// longest proper prefix of n[:i+1] that is also its suffix.
func failure(n string) []int32 {
	f := make([]int32, len(n))
	k := int32(0)
	for i := 1; i < len(n); i++ {
		for k > 0 && n[i] != n[k] {
			k = f[k-1]
		}
		if n[i] == n[k] {
			k++
		}
		f[i] = k
	}
	return f
}

// span is one match: s[start:end] is a needle.
type span struct{ start, end int }

// matches are the matches in s, leftmost first, longest first at a
// position, without overlaps. Each needle's next occurrence is kept and
// searched again only once a match went past it, so s is scanned once per
// needle.
func (m *Masker) matches(s string) []span {
	next := make([]int, len(m.needles))
	for i, n := range m.needles {
		next[i] = strings.Index(s, n)
	}
	var out []span
	for {
		bi := -1
		for i, at := range next {
			if at >= 0 && (bi < 0 || at < next[bi]) {
				bi = i // strictly left of the best so far: equal positions keep the longer one
			}
		}
		if bi < 0 {
			return out
		}
		sp := span{next[bi], next[bi] + len(m.needles[bi])}
		out = append(out, sp)
		for i, at := range next {
			if at >= 0 && at < sp.end {
				if k := strings.Index(s[sp.end:], m.needles[i]); k >= 0 {
					next[i] = sp.end + k
				} else {
					next[i] = -1
				}
			}
		}
	}
}

// apply writes s[:cut] with the spans (those ending by cut) masked.
func apply(b []byte, s string, spans []span, cut int) []byte {
	last := 0
	for _, sp := range spans {
		if sp.end > cut {
			break
		}
		b = append(b, s[last:sp.start]...)
		b = append(b, Mask...)
		last = sp.end
	}
	return append(b, s[last:cut]...)
}

// String is s with every match masked (s itself when there is none).
func (m *Masker) String(s string) string {
	if m == nil || len(s) == 0 {
		return s
	}
	spans := m.matches(s)
	if len(spans) == 0 {
		return s
	}
	return string(apply(make([]byte, 0, len(s)), s, spans, len(s)))
}

// Bytes is b with every match masked (b itself when there is none): for
// what a run sends back as bytes rather than text, such as the content of
// its output artifacts.
func (m *Masker) Bytes(b []byte) []byte {
	if m == nil || len(b) == 0 || !m.containsBytes(b) {
		return b
	}
	return []byte(m.String(string(b)))
}

// Contains reports whether s holds something String would mask.
func (m *Masker) Contains(s string) bool {
	if m == nil {
		return false
	}
	for _, n := range m.needles {
		if strings.Contains(s, n) {
			return true
		}
	}
	return false
}

func (m *Masker) containsBytes(b []byte) bool {
	for _, n := range m.needles {
		if bytes.Contains(b, []byte(n)) {
			return true
		}
	}
	return false
}

// JSON is the JSON text raw with every string (keys too) masked as its
// decoded text would be: a string holding a match is written anew,
// escaped as encoding/json writes it (HTML characters as they are); the
// rest of raw, formatting and key order included, is kept byte for byte.
// raw is returned as is when nothing is masked. Text that is not valid
// JSON is masked as text.
func (m *Masker) JSON(raw []byte) []byte {
	if m == nil || len(raw) == 0 {
		return raw
	}
	if !json.Valid(raw) {
		s := string(raw)
		if out := m.String(s); out != s {
			return []byte(out)
		}
		return raw
	}
	// Strings without escapes are their bytes: nothing to do when no
	// string has an escape and no form appears at all.
	if bytes.IndexByte(raw, '\\') < 0 && !m.containsBytes(raw) {
		return raw
	}
	var out []byte
	last := 0
	for i := 0; i < len(raw); i++ {
		if raw[i] != '"' {
			continue
		}
		j, esc := i+1, false
		for j < len(raw) && raw[j] != '"' {
			if raw[j] == '\\' {
				esc = true
				j++
			}
			j++
		}
		lit := raw[i : j+1]
		var text string
		if esc {
			if json.Unmarshal(lit, &text) != nil {
				i = j
				continue
			}
		} else {
			text = string(lit[1 : len(lit)-1])
		}
		if masked := m.String(text); masked != text {
			out = append(out, raw[last:i]...)
			out = jsonsize.AppendString(out, masked)
			last = j + 1
		}
		i = j
	}
	if out == nil {
		return raw
	}
	return append(out, raw[last:]...)
}

// hold is the length of the longest suffix of s that is a proper prefix
// of some needle: bytes that a match may still start in once more text
// comes. Each needle's KMP automaton runs over the last maxLen-1 bytes.
func (m *Masker) hold(s []byte) int {
	tail := s[max(0, len(s)-(m.maxLen-1)):]
	best := 0
	for i, n := range m.needles {
		if len(n)-1 <= best {
			break // needles are longest first: none left can beat best
		}
		f := m.fail[i]
		q := int32(0)
		for _, c := range tail {
			for q > 0 && (int(q) == len(n) || n[q] != c) {
				q = f[q-1]
			}
			if n[q] == c {
				q++
			}
		}
		if int(q) == len(n) {
			q = f[q-1]
		}
		best = max(best, int(q))
	}
	return best
}

// MaxChunk is the largest chunk a Stream passes on (the sandbox's live
// output contract).
const MaxChunk = 32 << 10

// Stream masks live output: chunks of several streams (stdout, stderr),
// each written in order, passed on masked to out, each stream holding back
// the bytes a match may still start in (at most the longest form's length
// less one) until more text comes or Flush. A secret split over two chunks
// (two flushes of the tool's print) is masked whole. Write and Flush are
// safe for concurrent use; out is called with the stream's bytes in order
// and must not keep them.
type Stream struct {
	m   *Masker
	out func(stream string, p []byte)

	mu      sync.Mutex // guards pending and serialises out per Stream
	pending map[string][]byte
}

// Stream returns a Stream masking into out; nil when m is nil (nothing to
// mask: write to out directly).
func (m *Masker) Stream(out func(stream string, p []byte)) *Stream {
	if m == nil || out == nil {
		return nil
	}
	return &Stream{m: m, out: out, pending: map[string][]byte{}}
}

// Write takes p, the next chunk of stream.
func (st *Stream) Write(stream string, p []byte) {
	st.mu.Lock()
	defer st.mu.Unlock()
	buf := append(st.pending[stream], p...)
	cut := len(buf) - st.m.hold(buf)
	for cut > 0 && cut < len(buf) && !utf8.RuneStart(buf[cut]) && len(buf)-cut < st.m.maxLen+utf8.UTFMax {
		cut-- // hold back a character's start too
	}
	s := string(buf)
	spans := st.m.matches(s)
	for _, sp := range spans {
		if sp.start < cut && sp.end > cut {
			cut = sp.end // a match is passed on whole
		}
	}
	st.emit(stream, apply(nil, s, spans, cut))
	st.pending[stream] = append(buf[:0:0], buf[cut:]...)
}

// Flush passes on what each stream holds back (at the end of the run).
func (st *Stream) Flush() {
	st.mu.Lock()
	defer st.mu.Unlock()
	names := make([]string, 0, len(st.pending))
	for k := range st.pending {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, stream := range names {
		s := string(st.pending[stream])
		st.emit(stream, apply(nil, s, st.m.matches(s), len(s)))
		delete(st.pending, stream)
	}
}

// emit passes b on in chunks of at most MaxChunk, cut at character
// starts.
func (st *Stream) emit(stream string, b []byte) {
	for len(b) > 0 {
		n := min(len(b), MaxChunk)
		for k := n; n < len(b) && k > n-utf8.UTFMax && k > 0; k-- {
			if utf8.RuneStart(b[k]) {
				n = k
				break
			}
		}
		st.out(stream, b[:n])
		b = b[n:]
	}
}
