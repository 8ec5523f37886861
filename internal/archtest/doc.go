// Package archtest holds the test that keeps l4lb's import direction: the
// algorithms and the flow table know nothing of sockets or TOML, only the
// reconciler and the command see the config. It has no code of its own.
package archtest
