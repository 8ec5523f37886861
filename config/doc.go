// Package config turns an l4lb TOML file into a validated, normalised,
// immutable Config.
//
// Decoding is strict: an unknown key is an error naming the key and its
// line. Validation reports every problem at once, each naming the file, the
// line and the VIP. Values come out typed (netip.AddrPort, time.Duration,
// and the names an operator writes, such as mode or algorithm, as the enum
// types of package l4, which config imports and nothing else of l4lb) with
// defaults applied: first the built-in ones, then the file's [defaults]
// table, then the VIP's own keys. Nothing here does I/O after reading the
// file (DNS names of backends are checked for form only; the reconciler
// resolves them), and the reconciler maps a Config onto running state.
//
// Each key is declared once, as a row of the key table of its TOML table
// (keys_vip.go, keys_health.go, keys_global.go, keys_backend.go): the
// Config field it fills, its kind, default and range, where it applies,
// when a reload applies a change, and what it does. Parsing, the scope
// checks, Format, Diff and Reference (docs/configuration.md) read the
// rows; a new key is a Config field, a row, and the code that uses it.
package config
