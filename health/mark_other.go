//go:build !linux

// mark_other.go: no socket marks off Linux; routed checks fail to connect.

package health

import (
	"errors"
	"syscall"
)

func markControl(uint32) func(string, string, syscall.RawConn) error {
	return func(string, string, syscall.RawConn) error { return errors.New("socket marks need Linux") }
}
