// spec_test.go: spec defaults, validation and equality.

package health

import (
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

func TestSpecValidate(t *testing.T) {
	if err := (Spec{}).Validate(); err != nil {
		t.Fatalf("zero spec: %v", err)
	}
	bad := Spec{Type: l4.CheckType(99), Interval: time.Second, Timeout: 2 * time.Second, Metric: l4.RTTMetric(9),
		Role: l4.DBRole(9), Expect: []byte("x"), ExpectRegex: "(", Path: "no slash", PostgresSSLMode: "require"}
	err := bad.Validate()
	if err == nil {
		t.Fatal("bad spec accepted")
	}
	for _, want := range []string{"unknown check type check(99)", "timeout 2s exceeds interval 1s", "unknown metric metric(9)",
		"unknown role role(9)", "expect and expect_regex are exclusive", "expect_regex:", `http path "no slash"`,
		`postgres sslmode "require"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := (Spec{Type: l4.CheckPostgres, Role: l4.RolePrimary}).Validate(); err == nil || !strings.Contains(err.Error(), "needs a user") {
		t.Errorf("role without user: %v", err)
	}
	if _, err := NewChecker(Spec{Type: l4.CheckNone}); err != ErrNoChecker {
		t.Errorf("type none: %v", err)
	}
}

func TestSpecEqual(t *testing.T) {
	a := Spec{Type: l4.CheckSendExpect, Send: []byte("a"), Expect: []byte("b")}
	b := a
	b.Send = []byte("a") // same bytes, different slice
	if !a.Equal(b) {
		t.Fatal("equal specs differ")
	}
	b.Expect = []byte("c")
	if a.Equal(b) {
		t.Fatal("different expect compares equal")
	}
	c := a
	c.Timeout = time.Second
	if a.Equal(c) {
		t.Fatal("different timeout compares equal")
	}
}
