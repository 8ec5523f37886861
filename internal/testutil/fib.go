// fib.go: asks bpf_fib_lookup, from inside a test namespace, what the XDP program would be told about a destination.

package testutil

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// bpf_fib_lookup return codes (BPF_FIB_LKUP_RET_*) that tests look for.
const (
	FIBSuccess     = 0 // next hop resolved: IfIndex, SMAC, DMAC are set
	FIBUnreachable = 2 // no route, or an unreachable one
	FIBFwdDisabled = 5 // forwarding is off on the ingress interface
	FIBNoNeigh     = 7 // route found, no valid neighbour entry for the next hop
	FIBFragNeeded  = 8 // TotLen exceeds the route's MTU (MTU says which)
)

// fibParamsSize is sizeof(struct bpf_fib_lookup).
const fibParamsSize = 64

// FIBQuery is what an XDP program passes to bpf_fib_lookup for a packet.
type FIBQuery struct {
	IfIndex  int        // the interface the packet arrived on
	Src, Dst netip.Addr // same family
	TotLen   int        // IP packet length; 0 means 100
}

// FIBResult is bpf_fib_lookup's answer.
type FIBResult struct {
	Ret        int // a FIB* code
	IfIndex    int // egress interface
	SMAC, DMAC net.HardwareAddr
	MTU        int // the route's MTU (mtu_result), meaningful with FIBFragNeeded
}

// FIBLookup runs bpf_fib_lookup (no flags: a full FIB lookup as seen from
// q.IfIndex) inside ns, through BPF_PROG_TEST_RUN of a small XDP program:
// the answer is the one an XDP program on that namespace's interface gets.
func FIBLookup(t testing.TB, ns *Netns, q FIBQuery) FIBResult {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "l4t_fib_lookup", Type: ebpf.XDP, License: "GPL", Instructions: fibLookupInsns(),
	})
	if err != nil {
		t.Fatalf("load fib lookup program: %v", err)
	}
	defer prog.Close()
	in := encodeFIBQuery(q)
	out := make([]byte, len(in))
	var ret uint32
	ns.MustDo(t, func() error {
		// BPF_PROG_TEST_RUN looks the route up in the calling thread's namespace.
		var err error
		ret, err = prog.Run(&ebpf.RunOptions{Data: in, DataOut: out})
		if err != nil {
			return fmt.Errorf("fib lookup test run in %s: %w", ns.Name, err)
		}
		return nil
	})
	return decodeFIBResult(int(ret), out)
}

// fibLookupInsns copies the packet (a struct bpf_fib_lookup) to the
// stack, calls bpf_fib_lookup on it, copies the answer back into the
// packet and returns the helper's return code.
func fibLookupInsns() asm.Instructions {
	const words = fibParamsSize / 8
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, 0, asm.Word), // data
		asm.LoadMem(asm.R3, asm.R6, 4, asm.Word), // data_end
		asm.Mov.Reg(asm.R4, asm.R7),
		asm.Add.Imm(asm.R4, fibParamsSize),
		asm.JGT.Reg(asm.R4, asm.R3, "short"),
	}
	for i := int16(0); i < words; i++ {
		insns = append(insns, asm.LoadMem(asm.R5, asm.R7, 8*i, asm.DWord), asm.StoreMem(asm.RFP, 8*i-fibParamsSize, asm.R5, asm.DWord))
	}
	insns = append(insns,
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -fibParamsSize),
		asm.Mov.Imm(asm.R3, fibParamsSize),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnFibLookup.Call(),
		asm.Mov.Reg(asm.R8, asm.R0),
	)
	for i := int16(0); i < words; i++ {
		insns = append(insns, asm.LoadMem(asm.R5, asm.RFP, 8*i-fibParamsSize, asm.DWord), asm.StoreMem(asm.R7, 8*i, asm.R5, asm.DWord))
	}
	return append(insns,
		asm.Mov.Reg(asm.R0, asm.R8),
		asm.Return(),
		asm.Mov.Imm(asm.R0, 0xff).WithSymbol("short"),
		asm.Return(),
	)
}

// encodeFIBQuery lays q out as struct bpf_fib_lookup: family, l4
// protocol, ports, tot_len (host order), ifindex, tos/flowinfo, then
// 16-byte src and dst unions.
func encodeFIBQuery(q FIBQuery) []byte {
	b := make([]byte, fibParamsSize)
	b[0] = unix.AF_INET6
	if q.Dst.Is4() {
		b[0] = unix.AF_INET
	}
	b[1] = unix.IPPROTO_TCP
	totLen := q.TotLen
	if totLen == 0 {
		totLen = 100
	}
	binary.NativeEndian.PutUint16(b[6:], uint16(totLen))
	binary.NativeEndian.PutUint32(b[8:], uint32(q.IfIndex))
	copy(b[16:32], q.Src.AsSlice())
	copy(b[32:48], q.Dst.AsSlice())
	return b
}

func decodeFIBResult(ret int, b []byte) FIBResult {
	return FIBResult{
		Ret:     ret,
		IfIndex: int(binary.NativeEndian.Uint32(b[8:])),
		MTU:     int(binary.NativeEndian.Uint16(b[6:])),
		SMAC:    net.HardwareAddr(append([]byte(nil), b[52:58]...)),
		DMAC:    net.HardwareAddr(append([]byte(nil), b[58:64]...)),
	}
}
