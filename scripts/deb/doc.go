// Package deb tests what `make install` and `make deb` put on a host: the
// files beside it are the Debian package's maintainer scripts, copyright
// and lintian overrides, and its tests build, lint, install, upgrade and
// remove the package in a throwaway root. The tests live in a package of
// their own so that `go test ./...` runs them beside the end-to-end tests
// of cmd/l4lb rather than after them.
package deb
