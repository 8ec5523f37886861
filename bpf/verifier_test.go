// The programs stay far from the verifier's limits.

package bpf

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/l4lb/l4lb/internal/testutil"
)

// TestVerifierBudget loads both programs with verifier statistics and
// fails if either needs more than a tenth of the 1M processed-instruction
// limit: headroom for older kernels and compilers, which explore more.
func TestVerifierBudget(t *testing.T) {
	testutil.RequirePriv(t, "loads BPF programs")
	for name, load := range map[string]func() (*ebpf.CollectionSpec, error){"xdp_lb": loadLb, "xdp_decap": loadDecap} {
		spec, err := load()
		must(t, err)
		coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}})
		must(t, err)
		prog := coll.Programs[name]
		m := regexp.MustCompile(`processed (\d+) insns`).FindStringSubmatch(prog.VerifierLog)
		coll.Close()
		if m == nil {
			t.Fatalf("%s: no statistics in %q", name, prog.VerifierLog)
		}
		n, _ := strconv.Atoi(m[1])
		t.Logf("%s: verifier processed %d instructions", name, n)
		if n > 100_000 {
			t.Errorf("%s: %d processed instructions, budget 100000", name, n)
		}
	}
}
