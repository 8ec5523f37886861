// postgres.go: real PostgreSQL servers for tests: a primary copied from a cached template, streaming replicas, promote.

package testutil

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresOptions configure StartPostgres; the zero value is a trust-auth
// server on a free port of 127.0.0.1.
type PostgresOptions struct {
	Addr  netip.Addr // listen address; default 127.0.0.1
	Port  uint16     // default: a free port
	Netns *Netns     // run the server inside this namespace (Addr must exist there)
	// User and Password create a login role. With a Password, TCP logins
	// need it (scram-sha-256, which "md5" lines also accept); without one
	// every TCP login is trusted.
	User, Password string
	// Settings are extra postgresql.conf settings.
	Settings []string
	// TLS turns ssl on with a self-signed certificate (SelfSignedTLS):
	// clients with sslmode=require (an SSLRequest, then TLS) get in.
	TLS bool
}

// Postgres is a running server. Its files live in a test temp dir, owned
// by the postgres user, which both initdb and the server insist on.
type Postgres struct {
	Addr      netip.AddrPort
	Dir       string // per-instance root (0755)
	DataDir   string
	SocketDir string // Unix socket and log; superuser logins come here
	LogFile   string
	User      string
	Password  string

	opts    PostgresOptions
	stopped bool
	paused  bool // Pause registered its cleanup
}

// StartPostgres starts a server for t and stops it on cleanup.
func StartPostgres(t testing.TB, opts PostgresOptions) *Postgres {
	t.Helper()
	RequirePriv(t, "PostgreSQL runs as the postgres user")
	RequireTool(t, "initdb", "pg_ctl", "runuser")
	if !opts.Addr.IsValid() {
		opts.Addr = netip.MustParseAddr("127.0.0.1")
	}
	p := newPostgresDirs(t, opts)
	copyTree(t, pgTemplate(t), p.DataDir)
	p.writeHBA(t)
	if opts.TLS {
		p.opts.Settings = append(p.writeCert(t), p.opts.Settings...)
	}
	p.start(t)
	if opts.User != "" {
		p.Exec(t, createRoleSQL(opts.User, opts.Password))
	}
	return p
}

// newPostgresDirs makes the instance's directories reachable by postgres
// (t.TempDir's parent is 0700) and picks its port.
func newPostgresDirs(t testing.TB, opts PostgresOptions) *Postgres {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatalf("chmod %s: %v", d, err)
		}
	}
	port := opts.Port
	if port == 0 {
		port = FreePort(t, opts.Netns, opts.Addr)
	}
	p := &Postgres{
		Addr: netip.AddrPortFrom(opts.Addr, port), Dir: dir,
		DataDir: filepath.Join(dir, "data"), SocketDir: filepath.Join(dir, "run"),
		User: opts.User, Password: opts.Password, opts: opts,
	}
	p.LogFile = filepath.Join(p.SocketDir, "postgres.log")
	mkdirOwned(t, p.SocketDir, 0o755, "postgres")
	return p
}

// writeHBA lets the superuser in over the socket (also for replication)
// and everyone over TCP by password or trust.
func (p *Postgres) writeHBA(t testing.TB) {
	t.Helper()
	method := "trust"
	if p.Password != "" {
		method = "scram-sha-256"
	}
	hba := "local all all trust\nlocal replication all trust\n" +
		"host all all 0.0.0.0/0 " + method + "\nhost all all ::/0 " + method + "\n"
	path := filepath.Join(p.DataDir, "pg_hba.conf")
	if err := os.WriteFile(path, []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	chownUser(t, path, "postgres")
}

// writeCert writes a self-signed certificate and its key (0600, the
// server insists) into the data directory and returns the settings that
// turn ssl on with them.
func (p *Postgres) writeCert(t testing.TB) []string {
	t.Helper()
	cert, _ := SelfSignedTLS(t, "localhost")
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*pem.Block{
		"server.crt": {Type: "CERTIFICATE", Bytes: cert.Certificate[0]},
		"server.key": {Type: "PRIVATE KEY", Bytes: key},
	}
	for name, b := range files {
		path := filepath.Join(p.DataDir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
		chownUser(t, path, "postgres")
	}
	return []string{"ssl=on", "ssl_cert_file=server.crt", "ssl_key_file=server.key"}
}

// start runs pg_ctl start -w and registers the stop.
func (p *Postgres) start(t testing.TB) {
	t.Helper()
	settings := append([]string{
		"listen_addresses=" + p.Addr.Addr().String(), "port=" + strconv.Itoa(int(p.Addr.Port())),
		"unix_socket_directories=" + p.SocketDir, "fsync=off", "synchronous_commit=off",
		"full_page_writes=off", "shared_buffers=16MB", "max_connections=30", "ssl=off",
	}, p.opts.Settings...)
	var o strings.Builder
	for _, s := range settings {
		fmt.Fprintf(&o, " -c %s", s)
	}
	out, err := p.pgCommand("pg_ctl", "-D", p.DataDir, "-l", p.LogFile, "-w", "-t", "30", "-o", o.String(), "start").CombinedOutput()
	if err != nil {
		t.Fatalf("pg_ctl start: %v: %s\nlog:\n%s", err, out, p.Log())
	}
	t.Cleanup(func() { p.stop() })
}

// pgCommand runs a PostgreSQL program as postgres, inside the namespace if any.
func (p *Postgres) pgCommand(name string, args ...string) *exec.Cmd {
	bin, err := lookPath(name)
	if err != nil {
		bin = name
	}
	argv := append([]string{"runuser", "-u", "postgres", "--", bin}, args...)
	if p.opts.Netns != nil {
		argv = append([]string{"ip", "netns", "exec", p.opts.Netns.Name}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = p.Dir // runuser keeps the cwd, which must be reachable by postgres
	return cmd
}

// StartReplica starts a streaming replica of p (pg_basebackup -R -c fast)
// on the same address and a new port; it stops on cleanup.
func (p *Postgres) StartReplica(t testing.TB) *Postgres {
	t.Helper()
	return p.StartReplicaAt(t, p.opts.Netns, p.opts.Addr)
}

// StartReplicaAt is StartReplica with the replica listening on addr in
// namespace ns (nil: the root namespace), on a free port. It streams from
// p over p's Unix socket, which every namespace reaches.
func (p *Postgres) StartReplicaAt(t testing.TB, ns *Netns, addr netip.Addr) *Postgres {
	t.Helper()
	opts := p.opts
	opts.Netns, opts.Addr, opts.Port = ns, addr, 0
	r := newPostgresDirs(t, opts)
	mkdirOwned(t, r.DataDir, 0o700, "postgres")
	out, err := r.pgCommand("pg_basebackup", "-h", p.SocketDir, "-p", strconv.Itoa(int(p.Addr.Port())),
		"-U", "postgres", "-D", r.DataDir, "-R", "-c", "fast", "-X", "stream", "--no-sync").CombinedOutput()
	if err != nil {
		t.Fatalf("pg_basebackup: %v: %s", err, out)
	}
	r.start(t)
	return r
}

// Promote turns a replica into a primary and waits until it is one.
func (p *Postgres) Promote(t testing.TB) {
	t.Helper()
	if out, err := p.pgCommand("pg_ctl", "-D", p.DataDir, "-w", "-t", "30", "promote").CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl promote: %v: %s", err, out)
	}
}

// Stop stops the server at once (-m immediate).
func (p *Postgres) Stop(t testing.TB) {
	t.Helper()
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
}

func (p *Postgres) stop() error {
	if p.stopped {
		return nil
	}
	p.stopped = true
	out, err := p.pgCommand("pg_ctl", "-D", p.DataDir, "-m", "immediate", "-w", "stop").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %w: %s", err, out)
	}
	return nil
}

// Pause stops every process of the server with SIGSTOP, by PID: the
// postmaster first (it forks no new backend then), then its children. A
// paused server is a hung one: its kernel still completes handshakes
// from the listen backlog and acknowledges requests, so TCP checks pass.
// Resume continues it; a server paused at the end of the test is resumed
// before it stops.
func (p *Postgres) Pause(t testing.TB) {
	t.Helper()
	if !p.paused {
		p.paused = true
		t.Cleanup(func() { p.signalAll(t, syscall.SIGCONT) })
	}
	p.signalAll(t, syscall.SIGSTOP)
}

// Resume continues a server Pause stopped (SIGCONT to each process).
func (p *Postgres) Resume(t testing.TB) {
	t.Helper()
	p.signalAll(t, syscall.SIGCONT)
}

// signalAll sends sig to the postmaster, then to each of its children.
func (p *Postgres) signalAll(t testing.TB, sig syscall.Signal) {
	t.Helper()
	pid := p.postmasterPID(t)
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("signal postmaster %d: %v", pid, err)
	}
	for _, c := range childPIDs(pid) {
		_ = syscall.Kill(c, sig) // a backend may have exited meanwhile
	}
}

// postmasterPID reads the first line of postmaster.pid.
func (p *Postgres) postmasterPID(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.DataDir, "postmaster.pid"))
	if err != nil {
		t.Fatalf("postmaster.pid: %v", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 1 {
		t.Fatalf("postmaster.pid: %q", first)
	}
	return pid
}

// childPIDs lists the processes whose parent is pid (/proc/*/stat).
func childPIDs(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}

// Command returns an unstarted PostgreSQL program (pgbench, psql, ...) run
// as the postgres user, inside the server's namespace if any; pass
// SocketArgs to reach the server as the superuser.
func (p *Postgres) Command(name string, args ...string) *exec.Cmd {
	return p.pgCommand(name, args...)
}

// SocketArgs are the -h, -p and -U options of a superuser login over the
// Unix socket.
func (p *Postgres) SocketArgs() []string {
	return []string{"-h", p.SocketDir, "-p", strconv.Itoa(int(p.Addr.Port())), "-U", "postgres"}
}

// QueryInt runs a query returning one integer as the superuser over the
// Unix socket.
func (p *Postgres) QueryInt(t testing.TB, sql string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable",
		p.SocketDir, p.Addr.Port()))
	if err != nil {
		t.Fatalf("postgres superuser login: %v", err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
		t.Fatalf("postgres %q: %v", sql, err)
	}
	return n
}

// Log returns the server log so far.
func (p *Postgres) Log() string {
	b, _ := os.ReadFile(p.LogFile)
	return string(b)
}

// Exec runs SQL as the superuser over the Unix socket.
func (p *Postgres) Exec(t testing.TB, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable",
		p.SocketDir, p.Addr.Port()))
	if err != nil {
		t.Fatalf("postgres superuser login: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("postgres %q: %v", sql, err)
	}
}

// createRoleSQL creates a login role, quoting name and password.
func createRoleSQL(name, password string) string {
	q := "CREATE ROLE " + pgx.Identifier{name}.Sanitize() + " LOGIN"
	if password != "" {
		q += " PASSWORD '" + strings.ReplaceAll(password, "'", "''") + "'"
	}
	return q
}

// pgTemplate returns an initialised data directory, made once per machine
// and PostgreSQL version under the temp dir and reused like a build cache:
// initdb takes 0.5-1.3 s, a copy 0.15 s. It is built beside its final
// name and renamed into place, so concurrent test processes never see a
// half-made template.
func pgTemplate(t testing.TB) string {
	t.Helper()
	initdb, err := lookPath("initdb")
	if err != nil {
		t.Fatal(err)
	}
	version, err := exec.Command(initdb, "--version").Output()
	if err != nil {
		t.Fatalf("initdb --version: %v", err)
	}
	root := cacheDir(t)
	final := filepath.Join(root, "pg-"+strings.Join(strings.Fields(string(version))[2:], "-")+"-template")
	if _, err := os.Stat(filepath.Join(final, "PG_VERSION")); err == nil {
		return final
	}
	tmp, err := os.MkdirTemp(root, ".pg-build-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	chownUser(t, tmp, "postgres")
	data := filepath.Join(tmp, "data")
	cmd := exec.Command("runuser", "-u", "postgres", "--", initdb, "-D", data, "--auth=trust",
		"--username=postgres", "--no-sync", "--no-instructions", "--encoding=UTF8", "--locale=C")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v: %s", err, out)
	}
	if err := os.Rename(data, final); err != nil {
		// Another process may have installed it first.
		if _, serr := os.Stat(filepath.Join(final, "PG_VERSION")); serr != nil {
			t.Fatalf("install template: %v", err)
		}
	}
	return final
}

// cacheDir is the machine-wide cache of test server templates.
func cacheDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "l4lb-testcache")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyTree copies src to dst keeping owners and modes.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v: %s", src, dst, err, out)
	}
}

// mkdirOwned makes dir with mode, owned by the named user.
func mkdirOwned(t testing.TB, dir string, mode os.FileMode, owner string) {
	t.Helper()
	if err := os.MkdirAll(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	chownUser(t, dir, owner)
}

// chownUser gives path to the named user and its primary group.
func chownUser(t testing.TB, path, name string) {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("user %s: %v", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
}

// FreePort returns a TCP port free on addr now, in ns when given. Another
// process may take it before the caller binds: servers that fail to start
// are rare enough that tests just fail.
func FreePort(t testing.TB, ns *Netns, addr netip.Addr) uint16 {
	t.Helper()
	var port uint16
	listen := func() error {
		l, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		if err != nil {
			return fmt.Errorf("free port on %s: %w", addr, err)
		}
		port = uint16(l.Addr().(*net.TCPAddr).Port)
		return l.Close()
	}
	var err error
	if ns != nil {
		err = ns.Do(listen)
	} else {
		err = listen()
	}
	if err != nil {
		t.Fatal(err)
	}
	return port
}
