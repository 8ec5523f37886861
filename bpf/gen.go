// Code generation for the XDP programs: bpf2go compiles lb.c, decap.c and hcenc.c
// with a pinned clang and writes the Go bindings and the BPF objects that
// are committed beside them (go generate ./bpf/; make generate-check).
// Map keys and values and the anchored enums are emitted by bpf2go without
// -type flags; xdp_md (the test-run context) is asked for explicitly.

package bpf

//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel -type xdp_md -type capture_record lb lb.c -- -I/usr/include/x86_64-linux-gnu -Iinclude -mcpu=v3 -Wall -Werror
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel decap decap.c -- -I/usr/include/x86_64-linux-gnu -Iinclude -mcpu=v3 -Wall -Werror
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel hcenc hcenc.c -- -I/usr/include/x86_64-linux-gnu -Iinclude -mcpu=v3 -Wall -Werror
