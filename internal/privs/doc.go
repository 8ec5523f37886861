// Package privs reads this process's Linux capabilities and drops those it
// no longer needs, on every thread at once.
//
// Capabilities belong to threads, not processes, and a Go program has many
// threads that the runtime starts and reuses as it likes: a capset(2) on
// one thread leaves the others (and the threads they later clone) with
// every capability. The drop goes through libcap's psx mechanism, which
// runs the syscall on every thread (syscall.AllThreadsSyscall without cgo,
// a signal to each thread with cgo, as under -race), and new threads
// inherit the result.
package privs
