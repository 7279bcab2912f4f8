package slots

import "testing"

func TestAKeyAndTheTotalAreCappedAndAReleaseCountsOnce(t *testing.T) {
	c := New(2, 3)
	a1, full := c.Take("a")
	if full != None {
		t.Fatalf("a's first slot: %v", full)
	}
	a2, _ := c.Take("a")
	if _, full := c.Take("a"); full != Key {
		t.Fatalf("a's third slot: %v, want Key", full)
	}
	b1, _ := c.Take("b")
	if _, full := c.Take("b"); full != Total {
		t.Fatalf("a fourth slot in all: %v, want Total", full)
	}
	a1()
	a1() // a second release gives nothing back
	if by, all := c.Held("a"); by != 1 || all != 2 {
		t.Fatalf("after one release twice: a holds %d, all %d; want 1 and 2", by, all)
	}
	if _, full := c.Take("c"); full != None {
		t.Fatalf("a slot after a release: %v", full)
	}
	a2()
	b1()
	if by, _ := c.Held("a"); by != 0 || len(c.by) != 1 {
		t.Fatalf("a holds %d after its releases; keys left %v (want only c's)", by, c.by)
	}
}

func TestWithoutATotalOnlyEachKeyIsCapped(t *testing.T) {
	c := New(1, 0)
	for _, k := range []string{"a", "b", "c", "d"} {
		if _, full := c.Take(k); full != None {
			t.Fatalf("%s: %v", k, full)
		}
	}
	if _, full := c.Take("a"); full != Key {
		t.Fatalf("a's second: %v, want Key", full)
	}
}
