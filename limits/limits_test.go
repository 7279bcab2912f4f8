package limits

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		l    Limits
		want []string // substrings of the error; none for a valid set
	}{
		{name: "the default set is valid", l: Default},
		{name: "the maximum set is valid", l: Max},
		{name: "a missing limit is refused by name", l: Limits{TimeoutMS: 1000, CPUMS: 1000, MemoryMB: 64, Pids: 8, OutputBytes: 100}, want: []string{"limits.tmp_mb: 0 is not positive"}},
		{name: "a negative limit is refused by name", l: func() Limits { l := Default; l.CPUMS = -1; return l }(), want: []string{"limits.cpu_ms: -1"}},
		{name: "a limit above the platform maximum is refused by name", l: func() Limits { l := Default; l.MemoryMB = Max.MemoryMB + 1; return l }(), want: []string{"limits.memory_mb: 2049 is above the platform maximum of 2048"}},
		{name: "every bad field is named", l: Limits{}, want: []string{"timeout_ms", "cpu_ms", "memory_mb", "pids", "output_bytes", "tmp_mb", "files", "files_bytes", "artifacts", "artifacts_bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.l.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate(%+v) = %v", tt.l, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate(%+v) passed", tt.l)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestOrFillsOnlyZeroFields(t *testing.T) {
	got := Limits{TimeoutMS: 700, Pids: 4}.Or(Default)
	want := Default
	want.TimeoutMS, want.Pids = 700, 4
	if got != want {
		t.Errorf("Or = %+v, want %+v", got, want)
	}
	if (Limits{}).Or(Default) != Default {
		t.Errorf("an empty set did not become the default")
	}
}
