package environments

import (
	"context"
	"errors"
	"testing"
)

func TestResolveGateBoundsTheProcessAndEachTenant(t *testing.T) {
	g := NewResolveGate(3, 2)
	busy := func(err error, tenant bool) bool {
		var b *ResolvesBusyError
		return errors.As(err, &b) && b.Tenant == tenant
	}
	a1, err := g.take("a")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := g.take("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.take("a"); !busy(err, true) {
		t.Fatalf("a third slot for tenant a: %v, want the tenant's ResolvesBusyError", err)
	}
	b1, err := g.take("b")
	if err != nil {
		t.Fatalf("tenant b is refused while a holds its own two: %v", err)
	}
	if _, err := g.take("c"); !busy(err, false) {
		t.Fatalf("a fourth slot in all: %v, want the process's ResolvesBusyError", err)
	}
	a1()
	a1() // twice: gives back one slot only
	if _, err := g.take("a"); err != nil {
		t.Fatalf("after a gave one back: %v", err)
	}
	if _, err := g.take("c"); !busy(err, false) {
		t.Fatalf("a1's double release freed two slots: %v", err)
	}
	a2()
	b1()
	if a, all := g.held.Held("a"); a != 1 || all != 1 {
		t.Fatalf("after the releases: a holds %d, %d in flight; want the one a took again", a, all)
	}
	for _, tenant := range []string{"b", "c"} {
		if _, err := takeSlot(WithResolveGate(context.Background(), g, tenant)); err != nil {
			t.Fatalf("tenant %s through the context: %v", tenant, err)
		}
	}
	if _, err := takeSlot(WithResolveGate(context.Background(), g, "d")); !busy(err, false) {
		t.Fatalf("through the context, past the gate's 3: %v", err)
	}
	if _, err := takeSlot(context.Background()); err != nil {
		t.Fatalf("without a gate: %v, want no bound", err)
	}
}
