// Package snapshot holds a VIP's immutable balancing snapshot (the eligible
// backends, their weights and the algorithm's prebuilt tables) and the
// atomic store that hot paths read it from.
//
// One writer builds a new Snapshot and stores it; readers Load it once per
// new flow and never see it change. A published Snapshot is never mutated.
package snapshot
