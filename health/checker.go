// checker.go: the Checker interface and the constructor that picks one per check type.
package health

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
)

// Checker runs one check against addr and returns its result. Check never
// takes longer than the checker's timeout (plus scheduling slack), honours
// ctx's cancellation and deadline, and is safe for concurrent use.
type Checker interface {
	Check(ctx context.Context, addr netip.AddrPort) Result
}

// ErrNoChecker is returned by NewChecker for type none.
var ErrNoChecker = errors.New("check type none has no active checker")

// NewChecker returns the checker that spec configures (defaults applied).
func NewChecker(spec Spec) (Checker, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("health spec: %w", err)
	}
	s := spec.withDefaults()
	switch s.Type {
	case TypeNone:
		return nil, ErrNoChecker
	case TypeTCP:
		return &tcpChecker{timeout: s.Timeout}, nil
	case TypeSendExpect:
		return newSendExpect(s), nil
	case TypePostgres:
		return newPostgres(s), nil
	case TypeMySQL:
		return newMySQL(s), nil
	case TypeRedis:
		return newRedis(s), nil
	case TypeHTTP:
		return newHTTP(s), nil
	}
	return nil, fmt.Errorf("health spec: unknown check type %q", s.Type)
}

// compileRegex compiles a validated expression; "" gives nil.
func compileRegex(expr string) *regexp.Regexp {
	if expr == "" {
		return nil
	}
	return regexp.MustCompile(expr) // Validate compiled it already
}
