package testenv

import (
	"bytes"
	"sync"
)

// SyncBuffer is a goroutine-safe bytes.Buffer for output written by other
// goroutines (exec's copiers, loggers) and read by the test.
type SyncBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
