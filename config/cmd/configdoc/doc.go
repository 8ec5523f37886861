// Command configdoc writes the configuration reference,
// docs/configuration.md, from the key tables of package config
// (config.Reference): every key with its syntax, default, context and
// reload effect, as nginx documents its directives. `make docs` runs it;
// its test fails when the page in the tree is not what it writes.
//
// Usage:
//
//	configdoc [-o FILE]
//
// A man page (l4lb.toml(5)) is another rendering of the same sections.
package main

//go:generate go run . -o ../../../docs/configuration.md
