// Allocation-free reads of per-CPU array elements, for stats polled often.

package bpf

import (
	"encoding/binary"
	"fmt"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// perCPU reads elements of per-CPU arrays whose values are u64 fields and
// sums them over the CPUs. ebpf.Map.Lookup allocates a buffer per call for
// per-CPU maps; this issues BPF_MAP_LOOKUP_ELEM itself into a buffer it
// keeps (so stats scrapes do not feed the GC).
type perCPU struct {
	ncpu int

	mu  sync.Mutex
	buf []byte // ncpu * largest value stride
}

func newPerCPU(maxValueSize int) (*perCPU, error) {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("possible cpus: %w", err)
	}
	return &perCPU{ncpu: n, buf: make([]byte, n*align8(maxValueSize))}, nil
}

func align8(n int) int { return (n + 7) &^ 7 }

// lookupAttr is the BPF_MAP_LOOKUP_ELEM part of union bpf_attr.
type lookupAttr struct {
	mapFD uint32
	_     uint32
	key   unsafe.Pointer
	value unsafe.Pointer
	flags uint64
}

const bpfMapLookupElem = 1 // BPF_MAP_LOOKUP_ELEM

// sumInto sums element key of m into out, a generated counters struct made
// only of u64 fields (a test holds every such type to that).
func sumInto[T any](p *perCPU, m *ebpf.Map, key uint32, out *T) error {
	words := unsafe.Slice((*uint64)(unsafe.Pointer(out)), unsafe.Sizeof(*out)/8)
	return p.sum(m, key, words)
}

// sum adds up, for each of len(out) u64 fields, element key of m over all
// CPUs into out.
func (p *perCPU) sum(m *ebpf.Map, key uint32, out []uint64) error {
	stride := align8(int(m.ValueSize()))
	if len(out)*8 > int(m.ValueSize()) || stride*p.ncpu > len(p.buf) {
		return fmt.Errorf("map %v: value of %d bytes does not fit", m, m.ValueSize())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	attr := lookupAttr{mapFD: uint32(m.FD()), key: unsafe.Pointer(&key), value: unsafe.Pointer(&p.buf[0])}
	_, _, errno := unix.Syscall(unix.SYS_BPF, bpfMapLookupElem, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno == unix.ENOENT {
		return fmt.Errorf("map %v key %d: %w", m, key, ErrNotFound)
	}
	if errno != 0 {
		return fmt.Errorf("map %v key %d: lookup: %w", m, key, errno)
	}
	clear(out)
	for cpu := range p.ncpu {
		b := p.buf[cpu*stride:]
		for i := range out {
			out[i] += binary.NativeEndian.Uint64(b[i*8:])
		}
	}
	return nil
}

// unsafeOne views one u64 as a one-element slice for sum.
func unsafeOne(v *uint64) []uint64 { return unsafe.Slice(v, 1) }
