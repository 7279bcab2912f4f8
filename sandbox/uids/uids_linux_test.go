package uids

import (
	"errors"
	"testing"
)

func TestUIDPoolLeasesAreExclusiveAcrossPoolsUntilReleased(t *testing.T) {
	dir := t.TempDir()
	// Two pools on one lease file stand for two execgate processes: every
	// lease has a descriptor of its own, so they conflict all the same.
	a := New(dir, 200000, 200001)
	b := New(dir, 200000, 200001)
	l1, err := a.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	l2, err := b.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	if l1.UID == l2.UID {
		t.Fatalf("two live leases share uid %d", l1.UID)
	}
	if _, err := a.Acquire(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("third lease of a two-uid range: %v, want ErrExhausted", err)
	}
	l1.Release()
	l3, err := b.Acquire()
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if l3.UID != l1.UID {
		t.Errorf("got uid %d, want the released %d", l3.UID, l1.UID)
	}
	l2.Release()
	l3.Release()
}
