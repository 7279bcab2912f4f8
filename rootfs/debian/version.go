package debian

import "strings"

// CompareVersions compares two Debian package versions
// ([epoch:]upstream[-revision]) as dpkg does (deb-version(7)): -1 when a
// is older than b, 0 when they are equal, 1 when a is newer.
func CompareVersions(a, b string) int {
	ea, ua, ra := splitVersion(a)
	eb, ub, rb := splitVersion(b)
	if ea != eb {
		if ea < eb {
			return -1
		}
		return 1
	}
	if c := compareFragment(ua, ub); c != 0 {
		return c
	}
	return compareFragment(ra, rb)
}

// splitVersion splits a version into its epoch (0 when absent), upstream
// version and revision ("" when absent).
func splitVersion(v string) (epoch int, upstream, revision string) {
	if i := strings.IndexByte(v, ':'); i >= 0 {
		for _, c := range v[:i] {
			if c < '0' || c > '9' {
				break
			}
			epoch = epoch*10 + int(c-'0')
		}
		v = v[i+1:]
	}
	if i := strings.LastIndexByte(v, '-'); i >= 0 {
		return epoch, v[:i], v[i+1:]
	}
	return epoch, v, ""
}

// compareFragment is dpkg's verrevcmp: alternating runs of non-digits
// (compared by order, where ~ sorts before everything, even the end of
// the string, and letters before other characters) and digits (compared
// numerically).
func compareFragment(a, b string) int {
	for a != "" || b != "" {
		for (a != "" && !isDigit(a[0])) || (b != "" && !isDigit(b[0])) {
			ca, cb := charOrder(a), charOrder(b)
			if ca != cb {
				if ca < cb {
					return -1
				}
				return 1
			}
			a, b = a[1:], b[1:]
		}
		for a != "" && a[0] == '0' {
			a = a[1:]
		}
		for b != "" && b[0] == '0' {
			b = b[1:]
		}
		first := 0
		for a != "" && isDigit(a[0]) && b != "" && isDigit(b[0]) {
			if first == 0 && a[0] != b[0] {
				first = int(a[0]) - int(b[0])
			}
			a, b = a[1:], b[1:]
		}
		if a != "" && isDigit(a[0]) {
			return 1
		}
		if b != "" && isDigit(b[0]) {
			return -1
		}
		if first != 0 {
			if first < 0 {
				return -1
			}
			return 1
		}
	}
	return 0
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// charOrder is the sort weight of the first character of s in a non-digit
// run: 0 at the end of the run, ~ below it, letters by code, other
// characters after every letter.
func charOrder(s string) int {
	if s == "" || isDigit(s[0]) {
		return 0
	}
	c := s[0]
	switch {
	case c == '~':
		return -1
	case (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'):
		return int(c)
	default:
		return int(c) + 256
	}
}
