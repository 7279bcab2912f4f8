// Package jsonsize measures and writes JSON strings byte for byte as
// encoding/json writes them with HTML escaping off (the gateway's
// encoder): control bytes become six-byte \u00XX escapes, \b \f \n \r \t
// " and \ two-byte ones, every byte of invalid UTF-8 the six bytes
// \ufffd, U+2028 and U+2029 six bytes; everything else is copied.
//
// Output caps are caps on what the gateway holds and sends, so tool
// output is measured in these encoded bytes, not in the bytes the tool
// wrote (a byte 0x01 costs six).
package jsonsize

import "unicode/utf8"

// Next returns the encoded size of the first character of p and how many
// bytes of p it spans. When p starts with an incomplete UTF-8 sequence that
// more bytes could complete, complete is false (unless atEOF, when each
// such byte is invalid and costs six). p must not be empty.
func Next(p []byte, atEOF bool) (cost, size int, complete bool) {
	if b := p[0]; b < utf8.RuneSelf {
		return asciiCost[b], 1, true
	}
	if !atEOF && !utf8.FullRune(p) {
		return 0, 0, false
	}
	r, size := utf8.DecodeRune(p)
	switch {
	case r == utf8.RuneError && size == 1:
		return 6, 1, true // written as \ufffd
	case r == '\u2028' || r == '\u2029':
		return 6, size, true
	}
	return size, size, true
}

// StringLen is the encoded size of s, quotes included.
func StringLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			n += asciiCost[b]
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// AppendString appends s as a JSON string, quotes included, exactly as
// encoding/json does with SetEscapeHTML(false).
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = AppendStringContent(dst, s)
	return append(dst, '"')
}

// AppendStringContent is AppendString without the quotes. A string may be
// written in pieces cut at character boundaries (CutAt).
func AppendStringContent(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if asciiCost[b] == 1 {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(dst, s[start:]...)
}

// CutAt returns the first place at or after n (n < len(s)) where s can be
// cut without splitting a character, so that writing s[:i] and s[i:]
// separately writes what writing s does: n itself, unless n falls inside a
// valid multi-byte sequence, then that sequence's end. (Every byte that is
// not a continuation byte starts a character in encoding/json's reading,
// and continuation bytes not covered by one are invalid bytes on their own.)
func CutAt(s string, n int) int {
	if n >= len(s) {
		return len(s)
	}
	for p := n - 1; p >= 0 && p > n-utf8.UTFMax; p-- {
		if utf8.RuneStart(s[p]) {
			if _, size := utf8.DecodeRuneInString(s[p:]); p+size > n {
				return p + size
			}
			return n
		}
	}
	return n
}

// asciiCost is the encoded size of each ASCII byte.
var asciiCost = func() (t [utf8.RuneSelf]int) {
	for b := range t {
		switch {
		case b == '\\' || b == '"' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t':
			t[b] = 2
		case b < 0x20:
			t[b] = 6
		default:
			t[b] = 1
		}
	}
	return t
}()
