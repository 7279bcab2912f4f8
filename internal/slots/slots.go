// Package slots counts what each tenant holds of something capped per
// tenant and, optionally, in all: a gateway's readers of stored results
// and of live output, its package resolutions in flight.
package slots

import "sync"

// Full says which cap refused a slot.
type Full int

const (
	None  Full = iota // a slot was taken
	Key               // the key (a tenant) holds its most
	Total             // all keys together hold the most
)

// Counter counts the slots held per key: at most perKey for one key and,
// when total > 0, total in all.
type Counter struct {
	perKey, total int
	mu            sync.Mutex // guards n and by
	n             int
	by            map[string]int // absent when 0
}

// New is a counter of at most perKey slots per key and total in all
// (0: no cap in all).
func New(perKey, total int) *Counter {
	return &Counter{perKey: perKey, total: total, by: map[string]int{}}
}

// Take holds a slot of key, or says which cap is full (release is nil
// then). release gives the slot back; calls after the first do nothing.
func (c *Counter) Take(key string) (release func(), full Full) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by[key] >= c.perKey {
		return nil, Key
	}
	if c.total > 0 && c.n >= c.total {
		return nil, Total
	}
	c.n++
	c.by[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.n--
			if c.by[key]--; c.by[key] <= 0 {
				delete(c.by, key)
			}
		})
	}, None
}

// Held is how many slots key holds and how many are held in all.
func (c *Counter) Held(key string) (byKey, all int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.by[key], c.n
}
