package audit_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/execgate/execgate/audit"
)

// BenchmarkRecord is the cost of one durable record with 1 and 32 writers
// at once (concurrent records share fsyncs):
//
//	go test -run '^$' -bench Record ./audit
func BenchmarkRecord(b *testing.B) {
	for _, writers := range []int{1, 32} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			l, err := audit.New(audit.Config{File: filepath.Join(b.TempDir(), "audit.jsonl")})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			var n atomic.Int64
			record := func() error {
				r := records()["ok run"]
				r.ExecutionID = fmt.Sprintf("b-%d", n.Add(1))
				return l.Record(context.Background(), r)
			}
			b.ResetTimer()
			if writers == 1 {
				for b.Loop() {
					if err := record(); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			// RunParallel starts parallelism × GOMAXPROCS goroutines.
			b.SetParallelism(max(1, writers/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := record(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
