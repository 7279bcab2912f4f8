package cgroups

import (
	"testing"
	"time"
)

func TestCPUPollDelayNarrowsNearTheLimit(t *testing.T) {
	if d := CPUPollDelay(time.Hour); d != cpuPollMax {
		t.Errorf("far from the limit: %v, want %v", d, cpuPollMax)
	}
	if d := CPUPollDelay(time.Millisecond); d != cpuPollMin {
		t.Errorf("at the limit: %v, want %v", d, cpuPollMin)
	}
	if d := CPUPollDelay(-time.Second); d != cpuPollMin {
		t.Errorf("past the limit: %v, want %v", d, cpuPollMin)
	}
}
