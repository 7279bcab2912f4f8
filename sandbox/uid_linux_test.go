package sandbox

import (
	"errors"
	"testing"
)

func TestUIDPoolLeasesAreExclusiveAcrossPoolsUntilReleased(t *testing.T) {
	dir := t.TempDir()
	// Two pools on one lease file stand for two execgate processes: every
	// lease has a descriptor of its own, so they conflict all the same.
	a, err := newUIDPool(dir, "200000-200001")
	if err != nil {
		t.Fatal(err)
	}
	b, err := newUIDPool(dir, "200000-200001")
	if err != nil {
		t.Fatal(err)
	}
	l1, err := a.acquire()
	if err != nil {
		t.Fatal(err)
	}
	l2, err := b.acquire()
	if err != nil {
		t.Fatal(err)
	}
	if l1.uid == l2.uid {
		t.Fatalf("two live leases share uid %d", l1.uid)
	}
	if _, err := a.acquire(); !errors.Is(err, ErrUIDsExhausted) {
		t.Fatalf("third lease of a two-uid range: %v, want ErrUIDsExhausted", err)
	}
	l1.release()
	l3, err := b.acquire()
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if l3.uid != l1.uid {
		t.Errorf("got uid %d, want the released %d", l3.uid, l1.uid)
	}
	l2.release()
	l3.release()
}

func TestParseUIDRange(t *testing.T) {
	tests := []struct {
		in     string
		lo, hi uint32
		ok     bool
	}{
		{"100000-165535", 100000, 165535, true},
		{"5-5", 5, 5, true},
		{"0-10", 0, 0, false},
		{"10-5", 0, 0, false},
		{"100000", 0, 0, false},
		{"a-b", 0, 0, false},
		{"1-4294967295", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			lo, hi, err := ParseUIDRange(tt.in)
			if (err == nil) != tt.ok || lo != tt.lo || hi != tt.hi {
				t.Errorf("ParseUIDRange(%q) = %d, %d, %v", tt.in, lo, hi, err)
			}
		})
	}
}
