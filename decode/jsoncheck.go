package decode

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/execgate/execgate/execution"
)

// DefaultMaxDepth is how deep a body's objects and arrays may nest when
// the caps name no depth (server.max_json_depth's default).
const DefaultMaxDepth = 64

// CheckJSON is the edge check every JSON request body passes before it is
// decoded (execute, validate, the admin quota and policy dry-run bodies):
//
//   - containers (objects and arrays) nest at most maxDepth levels, the body
//     itself being level 1 (server.max_json_depth; <= 0 means the default);
//   - every string and every object key is valid UTF-8, and every \u escape
//     is a Unicode scalar value: a UTF-16 surrogate escape must be a high
//     one followed by a low one. encoding/json would silently turn invalid
//     bytes and lone surrogates such as "\udc80" into U+FFFD, so the tool
//     would see something else than what was sent; they are refused instead.
//
// The error is a 400 BadRequest naming the JSON path of the offending value
// (e.g. "args.a.b[3]: nests deeper than 64 levels"). Syntax errors are
// "body: is not valid JSON". The scan is one iterative pass over the bytes
// (no recursion, no decoding), so its work is linear in the body and its
// memory linear in maxDepth.
func CheckJSON(body []byte, maxDepth int) error {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	s := &jsonScan{b: body, max: maxDepth}
	s.ws()
	if s.i == len(s.b) {
		return execution.BadRequest("body", "is empty; want a JSON object")
	}
	if err := s.run(); err != nil {
		return err
	}
	s.ws()
	if s.i != len(s.b) {
		return s.syntax()
	}
	return nil
}

// jsonFrame is one open container: an object (with the key of the value
// being scanned, as raw bytes between the quotes) or an array (with the
// index of the value being scanned).
type jsonFrame struct {
	obj bool
	key []byte
	idx int
}

type jsonScan struct {
	b     []byte
	i     int
	max   int
	stack []jsonFrame
}

// Problems a string can have (besides syntax).
var (
	errJSONSyntax    = errors.New("syntax")
	errJSONUTF8      = errors.New("invalid UTF-8")
	errJSONSurrogate = errors.New("unpaired surrogate")
)

func (s *jsonScan) syntax() error {
	return execution.BadRequest("body", "is not valid JSON (at byte %d)", s.i)
}

func (s *jsonScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// run scans one value (the body) without recursion.
func (s *jsonScan) run() error {
	for {
		s.ws()
		if s.i >= len(s.b) {
			return s.syntax()
		}
		switch c := s.b[s.i]; c {
		case '{', '[':
			if len(s.stack) >= s.max {
				return execution.BadRequest(s.path(len(s.stack)), "nests deeper than %d levels (server.max_json_depth)", s.max)
			}
			s.i++
			s.stack = append(s.stack, jsonFrame{obj: c == '{'})
			s.ws()
			if s.i < len(s.b) && (s.b[s.i] == '}' && c == '{' || s.b[s.i] == ']' && c == '[') {
				s.i++
				s.stack = s.stack[:len(s.stack)-1]
			} else if c == '{' {
				if err := s.key(); err != nil {
					return err
				}
				continue
			} else {
				continue
			}
		case '"':
			if err := s.str(); err != nil {
				return s.stringError(err, s.path(len(s.stack)), "")
			}
		case 't':
			if err := s.literal("true"); err != nil {
				return err
			}
		case 'f':
			if err := s.literal("false"); err != nil {
				return err
			}
		case 'n':
			if err := s.literal("null"); err != nil {
				return err
			}
		default:
			if err := s.number(); err != nil {
				return err
			}
		}
		// After a value: close containers or move to the next member.
		next, err := s.afterValue()
		if err != nil || !next {
			return err
		}
	}
}

// afterValue consumes what follows a value: commas (reading the next key
// in an object) and closing brackets. next is false once the body's value
// is complete.
func (s *jsonScan) afterValue() (next bool, err error) {
	for len(s.stack) > 0 {
		s.ws()
		if s.i >= len(s.b) {
			return false, s.syntax()
		}
		top := &s.stack[len(s.stack)-1]
		switch c := s.b[s.i]; {
		case c == ',':
			s.i++
			if top.obj {
				s.ws()
				return true, s.key()
			}
			top.idx++
			return true, nil
		case c == '}' && top.obj, c == ']' && !top.obj:
			s.i++
			s.stack = s.stack[:len(s.stack)-1]
		default:
			return false, s.syntax()
		}
	}
	return false, nil
}

// key scans `"key" :` into the top object frame.
func (s *jsonScan) key() error {
	top := &s.stack[len(s.stack)-1]
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return s.syntax()
	}
	start := s.i
	if err := s.str(); err != nil {
		return s.stringError(err, s.path(len(s.stack)-1), "a key ")
	}
	top.key = s.b[start+1 : s.i-1]
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return s.syntax()
	}
	s.i++
	return nil
}

// stringError names the path of a string that failed str.
func (s *jsonScan) stringError(err error, path, what string) error {
	switch {
	case errors.Is(err, errJSONUTF8):
		return execution.BadRequest(path, "%sholds invalid UTF-8 (at byte %d)", what, s.i)
	case errors.Is(err, errJSONSurrogate):
		return execution.BadRequest(path, "%sholds an unpaired UTF-16 surrogate escape %s (at byte %d)", what, s.b[s.i:min(s.i+6, len(s.b))], s.i)
	default:
		return s.syntax()
	}
}

// str scans a string starting at its opening quote; on success s.i is just
// past the closing quote, on error at the offending byte.
func (s *jsonScan) str() error {
	s.i++
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return nil
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return errJSONSyntax
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				r, ok := hex4(s.b[s.i+2:])
				if !ok {
					return errJSONSyntax
				}
				switch {
				case r >= 0xD800 && r <= 0xDBFF:
					// A high surrogate must be followed by a low one.
					if s.i+11 < len(s.b) && s.b[s.i+6] == '\\' && s.b[s.i+7] == 'u' {
						if lo, ok := hex4(s.b[s.i+8:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
							s.i += 12
							continue
						}
					}
					return errJSONSurrogate
				case r >= 0xDC00 && r <= 0xDFFF:
					return errJSONSurrogate
				}
				s.i += 6
			default:
				return errJSONSyntax
			}
		case c < 0x20:
			return errJSONSyntax
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size == 1 {
				return errJSONUTF8
			}
			s.i += size
		}
	}
	return errJSONSyntax
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(n), err == nil
}

func (s *jsonScan) literal(lit string) error {
	if !strings.HasPrefix(string(s.b[s.i:min(s.i+len(lit), len(s.b))]), lit) {
		return s.syntax()
	}
	s.i += len(lit)
	return nil
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jsonScan) number() error {
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case digits() == 0:
		return s.syntax()
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return s.syntax()
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return s.syntax()
		}
	}
	return nil
}

// path renders the JSON path of the value being scanned in the first n
// frames, in the form the decoder's messages use: top-level keys bare,
// then .key or [index]; keys that are not plain names are quoted in
// brackets and long ones shortened. The body itself is "body".
func (s *jsonScan) path(n int) string {
	var b strings.Builder
	for i, f := range s.stack[:n] {
		if !f.obj {
			if i == 0 {
				b.WriteString("body")
			}
			fmt.Fprintf(&b, "[%d]", f.idx)
			continue
		}
		k := displayKey(f.key)
		switch {
		case !plainKey(k):
			fmt.Fprintf(&b, "[%q]", k)
		case i > 0:
			b.WriteString("." + k)
		default:
			b.WriteString(k)
		}
	}
	if b.Len() == 0 {
		return "body"
	}
	return b.String()
}

// maxPathKey is the longest key shown in a path; longer ones are cut.
const maxPathKey = 64

// displayKey decodes a raw key (already checked) for a message.
func displayKey(raw []byte) string {
	k := string(raw)
	if strings.IndexByte(k, '\\') >= 0 {
		var dec string
		if json.Unmarshal([]byte(`"`+k+`"`), &dec) == nil {
			k = dec
		}
	}
	if len(k) > maxPathKey {
		cut := maxPathKey
		for cut > 0 && !utf8.RuneStart(k[cut]) {
			cut--
		}
		k = k[:cut] + "…"
	}
	return k
}

func plainKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
