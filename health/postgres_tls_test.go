// postgres_tls_test.go: the postgres check against a server with ssl=on.

package health

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// TestPostgresTLS: the plain check passes on 'S' and the login negotiates
// TLS (sslmode=prefer). It pins down the hazard doc.go states: after 'S'
// the server wants a ClientHello, and the plain probe's close is logged.
func TestPostgresTLS(t *testing.T) {
	t.Parallel()
	testutil.RequirePriv(t, "PostgreSQL runs as the postgres user")
	cert, key := writeCert(t)
	p := testutil.StartPostgres(t, testutil.PostgresOptions{User: "probe", Password: "pw",
		Settings: []string{"ssl=on", "ssl_cert_file=" + cert, "ssl_key_file=" + key}})
	wantOK(t, check(t, Spec{Type: l4.CheckPostgres}, p.Addr))
	wantOK(t, check(t, Spec{Type: l4.CheckPostgres, User: "probe", Password: "pw", Role: l4.RolePrimary}, p.Addr))
	deadline := time.Now().Add(2 * time.Second)
	for !strings.Contains(p.Log(), "could not accept SSL connection") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(p.Log(), "could not accept SSL connection") {
		t.Logf("server log:\n%s", p.Log())
		t.Error("no SSL complaint logged for the plain probe: update the hazard in doc.go and postgres.go")
	}
}

// writeCert writes a self-signed certificate and key the postgres user
// can read, and returns their paths.
func writeCert(t *testing.T) (string, string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cert, key := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	writeOwned(t, cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	writeOwned(t, key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	return cert, key
}

// writeOwned writes a 0600 file owned by the postgres user.
func writeOwned(t *testing.T, path string, b []byte) {
	t.Helper()
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
}
