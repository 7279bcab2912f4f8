package gateway

import (
	"strings"
	"testing"
)

func TestTenantShareDefaultsAndBounds(t *testing.T) {
	for _, tc := range []struct {
		name                string
		in                  Config
		wantRuns, wantQueue int
		wantErr             string
	}{
		{"three of four slots and half the queue", Config{MaxConcurrentRuns: 4, MaxQueue: 64}, 3, 32, ""},
		{"one slot stays one slot", Config{MaxConcurrentRuns: 1, MaxQueue: 1}, 1, 1, ""},
		{"two slots leave one to the others", Config{MaxConcurrentRuns: 2, MaxQueue: 5}, 1, 3, ""},
		{"no waiting room means none for a tenant", Config{MaxConcurrentRuns: 4, MaxQueue: -1}, 3, 0, ""},
		{"a negative tenant queue means no waiting", Config{MaxConcurrentRuns: 4, TenantMaxQueue: -1}, 3, 0, ""},
		{"the cap can be turned off", Config{MaxConcurrentRuns: 4, TenantMaxRuns: 4, MaxQueue: 8, TenantMaxQueue: 8}, 4, 8, ""},
		{"a cap above the slots is refused", Config{MaxConcurrentRuns: 4, TenantMaxRuns: 5}, 0, 0, "server.tenant_max_runs"},
		{"a negative cap is refused", Config{MaxConcurrentRuns: 4, TenantMaxRuns: -1}, 0, 0, "server.tenant_max_runs"},
		{"a tenant queue above the queue is refused", Config{MaxQueue: 8, TenantMaxQueue: 9}, 0, 0, "server.tenant_max_queue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.in.WithDefaults()
			err := c.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Validate() = %v, want an error naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.TenantMaxRuns != tc.wantRuns || c.TenantMaxQueue != tc.wantQueue {
				t.Fatalf("tenant_max_runs %d, tenant_max_queue %d; want %d, %d", c.TenantMaxRuns, c.TenantMaxQueue, tc.wantRuns, tc.wantQueue)
			}
		})
	}
}
