// Package l4 is the shared vocabulary of l4lb: protocols, VIP keys, flows
// (5-tuples), backends with their live per-flow state, and health states.
//
// Every other package of the project may import l4; l4 imports nothing of
// the project. Types here are small values or structs of atomics: a Backend
// is shared by every balancer snapshot that contains it, so its live-flow
// count and RTT estimate survive snapshot swaps and config reloads.
package l4
