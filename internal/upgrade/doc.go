// Package upgrade is the handover between a running l4lb and the new
// binary it starts (SIGUSR2, `l4lb upgrade`): a SOCK_SEQPACKET socketpair
// carrying JSON messages with descriptors attached. The old side (Old)
// starts the new process and passes its listening sockets, its backends'
// state, its UDP sessions and its established TCP connections; the new
// side (New) takes them instead of binding, adopts what it can, then
// becomes the service's main process. Either side acts through the
// running process's runtime (Runtime) and callbacks; it knows nothing of
// signals, the admin API's handlers or metrics beyond the sockets it
// passes. A failure before the commit leaves the old process serving as
// it was. The message order is in docs/design.md, "Upgrade".
package upgrade
