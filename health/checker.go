// checker.go: the Checker interface and the constructor that picks one per check type.

package health

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"

	"github.com/l4lb/l4lb/l4"
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
	case l4.CheckNone:
		return nil, ErrNoChecker
	case l4.CheckTCP:
		return &tcpChecker{optsOf(s)}, nil
	case l4.CheckSendExpect:
		return newSendExpect(s), nil
	case l4.CheckPostgres:
		return newPostgres(s), nil
	case l4.CheckMySQL:
		return newMySQL(s), nil
	case l4.CheckRedis:
		return newRedis(s), nil
	case l4.CheckHTTP:
		return newHTTP(s), nil
	case l4.CheckUDP:
		return newUDP(s), nil
	case l4.CheckDNS:
		return newDNS(s), nil
	case l4.CheckTLS:
		return newTLS(s), nil
	}
	return nil, fmt.Errorf("health spec: unknown check type %s", s.Type)
}

// compileRegex compiles a validated expression; "" gives nil.
func compileRegex(expr string) *regexp.Regexp {
	if expr == "" {
		return nil
	}
	return regexp.MustCompile(expr) // Validate compiled it already
}
