// mysql.go: a real MariaDB server for tests, copied from a cached template data directory.

package testutil

import (
	"context"
	"database/sql/driver"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MySQLOptions configure StartMySQL; the zero value is a server on a free
// port of 127.0.0.1 with only root (no password, from 127.0.0.1).
type MySQLOptions struct {
	Addr  netip.Addr // default 127.0.0.1
	Port  uint16     // default: a free port
	Netns *Netns     // run the server inside this namespace
	// User and Password create a login user ('User'@'%') with no privileges.
	User, Password string
	// Args are extra mariadbd options ("--max-connect-errors=3").
	Args []string
}

// MySQL is a running MariaDB server (Debian packages mariadb-server-core
// and mariadb-client-core; the latter brings my_print_defaults, which
// mariadb-install-db needs).
type MySQL struct {
	Addr     netip.AddrPort
	Dir      string
	User     string
	Password string
	cmd      *exec.Cmd
	exited   chan struct{}
}

// mysqlServerArgs keep a test server small and fast to start.
func mysqlServerArgs() []string {
	return []string{"--innodb-buffer-pool-size=8M", "--innodb-log-file-size=4M",
		"--skip-log-bin", "--skip-name-resolve", "--performance-schema=OFF"}
}

// StartMySQL starts mariadbd for t and kills it on cleanup.
func StartMySQL(t testing.TB, opts MySQLOptions) *MySQL {
	t.Helper()
	RequirePriv(t, "mariadbd runs as root with --user=root")
	RequireTool(t, "mariadbd", "mariadb-install-db", "my_print_defaults")
	if !opts.Addr.IsValid() {
		opts.Addr = netip.MustParseAddr("127.0.0.1")
	}
	if opts.Port == 0 {
		opts.Port = FreePort(t, opts.Netns, opts.Addr)
	}
	m := &MySQL{Addr: netip.AddrPortFrom(opts.Addr, opts.Port), Dir: t.TempDir(),
		User: opts.User, Password: opts.Password, exited: make(chan struct{})}
	copyTree(t, mysqlTemplate(t), filepath.Join(m.Dir, "data"))
	m.start(t, opts)
	m.waitReady(t)
	if opts.User != "" {
		m.Exec(t, fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'",
			sqlQuote(opts.User), sqlQuote(opts.Password)))
	}
	return m
}

// start launches mariadbd in the foreground (as a child we can kill by PID).
func (m *MySQL) start(t testing.TB, opts MySQLOptions) {
	t.Helper()
	bin, _ := lookPath("mariadbd")
	argv := append([]string{bin, "--no-defaults", "--user=root",
		"--datadir=" + filepath.Join(m.Dir, "data"), "--socket=" + filepath.Join(m.Dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(m.Dir, "mysqld.pid"), "--log-error=" + m.logPath(),
		"--bind-address=" + opts.Addr.String(), "--port=" + strconv.Itoa(int(opts.Port))},
		append(mysqlServerArgs(), opts.Args...)...)
	if opts.Netns != nil {
		argv = append([]string{"ip", "netns", "exec", opts.Netns.Name}, argv...)
	}
	m.cmd = exec.Command(argv[0], argv[1:]...)
	// Killed with the test process even when a panic or -timeout skips
	// cleanups (ip netns exec execs mariadbd, which keeps the setting).
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("mariadbd: %v", err)
	}
	go func() { _ = m.cmd.Wait(); close(m.exited) }()
	t.Cleanup(m.Stop)
}

// waitReady polls a root login until the server answers (about 0.7 s).
func (m *MySQL) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-m.exited:
			t.Fatalf("mariadbd exited:\n%s", m.Log())
		default:
		}
		if err := m.exec("SELECT 1"); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("mariadbd on %s not ready:\n%s", m.Addr, m.Log())
}

// Exec runs SQL as root over the Unix socket.
func (m *MySQL) Exec(t testing.TB, query string) {
	t.Helper()
	if err := m.exec(query); err != nil {
		t.Fatalf("mysql %q: %v", query, err)
	}
}

// QueryInt runs a query returning one integer as root over the Unix socket.
func (m *MySQL) QueryInt(t testing.TB, query string) int64 {
	t.Helper()
	var n int64
	err := m.withConn(func(ctx context.Context, conn driver.Conn) error {
		q, ok := conn.(driver.QueryerContext)
		if !ok {
			return fmt.Errorf("mysql driver connection cannot query")
		}
		rows, err := q.QueryContext(ctx, query, nil)
		if err != nil {
			return err
		}
		defer rows.Close()
		v := make([]driver.Value, len(rows.Columns()))
		if err := rows.Next(v); err != nil {
			return fmt.Errorf("no row: %w", err)
		}
		switch x := v[0].(type) {
		case int64:
			n = x
		case []byte:
			n, err = strconv.ParseInt(string(x), 10, 64)
		default:
			err = fmt.Errorf("value %T %v is not an integer", x, x)
		}
		return err
	})
	if err != nil {
		t.Fatalf("mysql %q: %v", query, err)
	}
	return n
}

// exec runs query as root@localhost over the Unix socket, which works
// from any namespace and whatever address the server listens on.
func (m *MySQL) exec(query string) error {
	return m.withConn(func(ctx context.Context, conn driver.Conn) error {
		ex, ok := conn.(driver.ExecerContext)
		if !ok {
			return fmt.Errorf("mysql driver connection cannot exec")
		}
		_, err := ex.ExecContext(ctx, query, nil)
		return err
	})
}

// withConn runs fn on a root@localhost connection over the Unix socket.
func (m *MySQL) withConn(fn func(context.Context, driver.Conn) error) error {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "unix", filepath.Join(m.Dir, "mysqld.sock")
	cfg.Timeout = time.Second
	cfg.Logger = &mysql.NopLogger{}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := connector.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return fn(ctx, conn)
}

// Log returns the server's error log.
func (m *MySQL) Log() string {
	b, _ := os.ReadFile(m.logPath())
	return string(b)
}

func (m *MySQL) logPath() string { return filepath.Join(m.Dir, "error.log") }

// Stop kills the server (its data is thrown away) and waits for it.
func (m *MySQL) Stop() {
	if m.cmd == nil || m.cmd.Process == nil {
		return
	}
	_ = m.cmd.Process.Kill()
	<-m.exited
}

// sqlQuote escapes a string for a single-quoted SQL literal.
func sqlQuote(s string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s)
}

// mysqlTemplate returns an initialised data directory, cached per machine
// and server version like pgTemplate (mariadb-install-db takes about 3 s,
// a copy 0.06 s).
func mysqlTemplate(t testing.TB) string {
	t.Helper()
	bin, _ := lookPath("mariadbd")
	version, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("mariadbd --version: %v", err)
	}
	fields := strings.Fields(string(version))
	root := cacheDir(t)
	final := filepath.Join(root, "mariadb-"+fields[min(2, len(fields)-1)]+"-template")
	if _, err := os.Stat(filepath.Join(final, "mysql")); err == nil {
		return final
	}
	tmp, err := os.MkdirTemp(root, ".mariadb-build-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	data := filepath.Join(tmp, "data")
	install, _ := lookPath("mariadb-install-db")
	args := append([]string{"--no-defaults", "--datadir=" + data, "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db"}, mysqlServerArgs()...)
	if out, err := exec.Command(install, args...).CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v: %s", err, out)
	}
	if err := os.Rename(data, final); err != nil {
		if _, serr := os.Stat(filepath.Join(final, "mysql")); serr != nil {
			t.Fatalf("install template: %v", err)
		}
	}
	return final
}
