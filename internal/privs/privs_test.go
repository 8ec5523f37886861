package privs

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestNames(t *testing.T) {
	tests := []struct {
		mask uint64
		want []string
	}{
		{0, []string{}},
		{1 << 10, []string{"cap_net_bind_service"}},
		{1<<12 | 1<<38 | 1<<39, []string{"cap_net_admin", "cap_perfmon", "cap_bpf"}},
	}
	for _, tc := range tests {
		if got := Names(tc.mask); !slices.Equal(got, tc.want) {
			t.Errorf("Names(%#x) = %v, want %v", tc.mask, got, tc.want)
		}
	}
}

func TestReadStatus(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status")
	status := "Name:\tl4lb\nCapInh:\t0000000000000000\nCapPrm:\t0000000000001400\nCapEff:\t0000000000000400\nCapBnd:\t000000c000001400\nCapAmb:\t0000000000000000\n"
	if err := os.WriteFile(path, []byte(status), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := ReadStatus(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Effective, []string{"cap_net_bind_service"}) ||
		!slices.Equal(s.Permitted, []string{"cap_net_bind_service", "cap_net_admin"}) ||
		!slices.Equal(s.Bounding, []string{"cap_net_bind_service", "cap_net_admin", "cap_perfmon", "cap_bpf"}) {
		t.Fatalf("%+v", s)
	}
	if err := os.WriteFile(path, []byte("CapEff:\tzz\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadStatus(path); err == nil {
		t.Fatal("a bad mask parsed")
	}
}
