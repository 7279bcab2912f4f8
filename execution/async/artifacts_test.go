package async_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgate/execgate/execution/async"
	"github.com/execgate/execgate/sandbox"
)

func art(name, data string) sandbox.Artifact {
	return sandbox.Artifact{Name: name, Bytes: int64(len(data)), MIME: "text/plain", SHA256: strings.Repeat("a", 64), Data: []byte(data)}
}

func TestAStoreKeepsArtifactsPerTenantAndExecution(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores(t, async.Limits{}) {
		t.Run(name, func(t *testing.T) {
			if err := st.PutArtifacts(ctx, "a", "run-1", []sandbox.Artifact{art("chart.png", "png bytes"), art("empty", ""), art("résumé ü.txt", "r")}); err != nil {
				t.Fatal(err)
			}
			k := async.Key{TenantID: "a", ExecutionID: "run-1"}
			got, release, ok, err := st.Artifact(ctx, k, "chart.png", nil)
			if !ok || err != nil || string(got.Data) != "png bytes" || got.MIME != "text/plain" || got.SHA256 != strings.Repeat("a", 64) || got.Name != "chart.png" {
				t.Fatalf("Artifact = %+v %v %v", got, ok, err)
			}
			release()
			if got, release, ok, _ := st.Artifact(ctx, k, "empty", nil); !ok || len(got.Data) != 0 {
				t.Errorf("an empty artifact: %+v %v", got, ok)
			} else {
				release()
			}
			if _, release, ok, _ := st.Artifact(ctx, k, "résumé ü.txt", nil); !ok {
				t.Errorf("a name with spaces and accents is not found")
			} else {
				release()
			}
			for _, miss := range []struct {
				k    async.Key
				name string
			}{
				{async.Key{TenantID: "b", ExecutionID: "run-1"}, "chart.png"}, // another tenant
				{async.Key{TenantID: "a", ExecutionID: "run-2"}, "chart.png"}, // another run
				{k, "other.png"},
			} {
				if _, _, ok, err := st.Artifact(ctx, miss.k, miss.name, nil); ok || err != nil {
					t.Errorf("Artifact(%v, %q) found (%v)", miss.k, miss.name, err)
				}
			}
		})
	}
}

func TestAStoreBoundsEachTenantsArtifactsOldestFirst(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores(t, async.Limits{TenantArtifactBytes: 10, MaxArtifacts: 3}) {
		t.Run(name, func(t *testing.T) {
			put := func(tenant, id string, arts ...sandbox.Artifact) {
				t.Helper()
				if err := st.PutArtifacts(ctx, tenant, id, arts); err != nil {
					t.Fatal(err)
				}
			}
			has := func(tenant, id, name string) bool {
				_, release, ok, err := st.Artifact(ctx, async.Key{TenantID: tenant, ExecutionID: id}, name, nil)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					release()
				}
				return ok
			}
			put("a", "1", art("x", "1234"))
			time.Sleep(2 * time.Millisecond) // Redis orders by ms
			put("a", "2", art("y", "1234"))
			time.Sleep(2 * time.Millisecond)
			put("a", "3", art("z", "1234")) // 12 bytes: the oldest goes
			if has("a", "1", "x") || !has("a", "2", "y") || !has("a", "3", "z") {
				t.Errorf("over the bytes: kept 1 %v, 2 %v, 3 %v; want the oldest dropped", has("a", "1", "x"), has("a", "2", "y"), has("a", "3", "z"))
			}
			time.Sleep(2 * time.Millisecond)
			put("a", "4", art("p", ""), art("q", ""))
			if has("a", "2", "y") || !has("a", "4", "q") {
				t.Errorf("over the count: 2 kept %v", has("a", "2", "y"))
			}
			put("a", "5", art("huge", "01234567890"))
			if has("a", "5", "huge") || !has("a", "3", "z") {
				t.Errorf("one larger than the budget: kept %v, and it pushed out others: %v", has("a", "5", "huge"), !has("a", "3", "z"))
			}
			put("b", "1", art("x", "1234567890"))
			if !has("a", "3", "z") || !has("b", "1", "x") {
				t.Errorf("one tenant's artifacts pushed out another's")
			}
		})
	}
}

func TestMemoryStoreForgetsArtifactsAfterTheResultTTL(t *testing.T) {
	now := time.Unix(1000, 0)
	st := async.NewMemoryStore(async.Limits{ResultTTL: time.Minute}, func() time.Time { return now })
	ctx := context.Background()
	if err := st.PutArtifacts(ctx, "a", "1", []sandbox.Artifact{art("x", "1")}); err != nil {
		t.Fatal(err)
	}
	k := async.Key{TenantID: "a", ExecutionID: "1"}
	if _, _, ok, _ := st.Artifact(ctx, k, "x", nil); !ok {
		t.Fatal("not kept")
	}
	now = now.Add(time.Minute)
	if _, _, ok, _ := st.Artifact(ctx, k, "x", nil); ok {
		t.Fatal("kept past the TTL")
	}
}

// Readers of one artifact share one copy out of Redis, reserved once.
func TestRedisArtifactReadersShareOneCopy(t *testing.T) {
	ctx := context.Background()
	st := stores(t, async.Limits{})["redis"]
	big := strings.Repeat("x", 1<<20)
	if err := st.PutArtifacts(ctx, "a", "1", []sandbox.Artifact{art("big.bin", big)}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	reserved := 0
	var wg sync.WaitGroup
	gate := make(chan struct{})
	reserve := func(ctx context.Context, n int64) (func(), error) {
		mu.Lock()
		reserved++
		mu.Unlock()
		<-gate // every reader is waiting for this one fetch
		return func() {}, nil
	}
	releases := make(chan func(), 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, release, ok, err := st.Artifact(ctx, async.Key{TenantID: "a", ExecutionID: "1"}, "big.bin", reserve)
			if !ok || err != nil || len(a.Data) != len(big) {
				t.Errorf("reader: %v %v %d", ok, err, len(a.Data))
				return
			}
			releases <- release
		}()
	}
	time.Sleep(100 * time.Millisecond)
	close(gate)
	wg.Wait()
	close(releases)
	for r := range releases {
		r()
	}
	if reserved != 1 {
		t.Errorf("%d reservations for 8 concurrent readers, want 1", reserved)
	}
}
