// Code generation for the stream verdict: bpf2go compiles fwd.c with the
// pinned clang into the committed fwd_bpfel.{go,o} (go generate
// ./l4/sockfwd/; make generate-check).

package sockfwd

//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel -type conn_dir fwd fwd.c -- -I/usr/include/x86_64-linux-gnu -mcpu=v3 -Wall -Werror
