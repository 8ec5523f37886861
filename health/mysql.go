// mysql.go: the mysql check: the server greeting, or a login that checks @@global.read_only.

package health

import (
	"context"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/l4lb/l4lb/l4"
)

// maxGreeting bounds the greeting packet; real ones are about 100 bytes.
const maxGreeting = 16 << 10

// mysqlChecker without a user reads the greeting the server sends on
// connect and checks protocol version 10, then closes without answering.
//
// Hazard: the server counts such a probe as an aborted connect
// (Aborted_connects). MySQL's manual counts interrupted handshakes toward
// the client host's max_connect_errors (default 100); a host that reaches
// it is blocked ("Host ... is blocked because of many connection errors")
// until FLUSH HOSTS, though a successful login resets the count (HAProxy's
// mysql-check has the same trap). MariaDB 10.11, measured, treats the FIN
// as "closed normally without authentication": logged at log_warnings >= 4
// only, and five probes did not block a host at max_connect_errors=3.
// Configure a user for production: then the probe logs in with
// go-sql-driver/mysql, reads @@global.read_only (0 = primary) and ends
// with COM_QUIT, which counts as nothing.
type mysqlChecker struct {
	connOpts
	role   l4.DBRole
	maxLag time.Duration
	user   string
	pass   string
	db     string
	// slaveSyntax: the server refused SHOW REPLICA STATUS (MySQL before
	// 8.0.22, MariaDB before 10.5.1); SHOW SLAVE STATUS from then on.
	slaveSyntax atomic.Bool
}

func newMySQL(s Spec) *mysqlChecker {
	return &mysqlChecker{connOpts: optsOf(s), role: s.Role, maxLag: s.MaxLag, user: s.User, pass: s.Password, db: s.Database}
}

func (ch *mysqlChecker) Check(ctx context.Context, addr netip.AddrPort) Result {
	if ch.user != "" {
		p := begin(ctx, ch.connOpts)
		ch.login(p, addr)
		return p.end(nil)
	}
	return overConn(ctx, ch.connOpts, addr, ch.greeting)
}

// greeting reads and judges the server's first packet. FirstByte is
// measured from the connect: the server speaks first.
func (ch *mysqlChecker) greeting(p *probe, c net.Conn) {
	fb := p.sent(c)
	var hdr [4]byte
	if _, err := io.ReadFull(fb, hdr[:]); err != nil {
		p.replied(fb)
		p.failErr(err, "waiting for greeting")
		return
	}
	p.replied(fb)
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	if n == 0 || n > maxGreeting || hdr[3] != 0 {
		p.fail("reply %q is not a MySQL greeting", hdr[:])
		return
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(fb, body); err != nil {
		p.failErr(err, "reading greeting")
		return
	}
	judgeGreeting(p, body)
}

// judgeGreeting passes protocol 10 and words an error packet (the server
// sends one instead of a greeting when it refuses the host or is full).
func judgeGreeting(p *probe, body []byte) {
	switch {
	case body[0] == 10:
		p.pass()
	case body[0] == 0xff && len(body) >= 3:
		code := binary.LittleEndian.Uint16(body[1:3])
		p.fail("server refused: error %d: %s", code, strings.TrimPrefix(string(body[3:]), "#"))
	default:
		p.fail("greeting protocol version %d, want 10 (not MySQL?)", body[0])
	}
}

// login connects with the driver, reads read_only and checks the role.
func (ch *mysqlChecker) login(p *probe, addr netip.AddrPort) {
	conn, err := ch.connect(p, addr)
	if err != nil {
		p.fail("%s", mysqlReason(p, err, "logging in"))
		return
	}
	defer conn.Close() // sends COM_QUIT
	sent := time.Now()
	readOnly, err := queryInt(p.ctx, conn, "SELECT @@global.read_only")
	if err != nil {
		p.fail("%s", mysqlReason(p, err, "querying @@global.read_only"))
		return
	}
	p.res.FirstByte = time.Since(sent)
	role := l4.RolePrimary
	if readOnly != 0 {
		role = l4.RoleReplica
	}
	checkRole(p, role, ch.role)
	if ch.role == l4.RoleReplica && p.res.OK {
		judgeLag(p, ch.readLag(p, conn), ch.maxLag)
	}
}

// connect opens one driver connection, outside database/sql: a probe needs
// no pool and no pool goroutines.
func (ch *mysqlChecker) connect(p *probe, addr netip.AddrPort) (driver.Conn, error) {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.DBName = ch.user, ch.pass, ch.db
	cfg.Net, cfg.Addr = "tcp", addr.String()
	cfg.Timeout = ch.timeout
	cfg.DialFunc = p.timedDialFunc(addr)
	cfg.Logger = &mysql.NopLogger{} // the driver would print to stderr; results carry the errors
	cfg.ConnectionAttributes = "program_name:l4lb-health"
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql config: %w", err)
	}
	return connector.Connect(p.ctx)
}

// queryInt runs a one-value query on a raw driver connection.
func queryInt(ctx context.Context, conn driver.Conn, query string) (int64, error) {
	q, ok := conn.(driver.QueryerContext)
	if !ok {
		return 0, errors.New("driver connection cannot query")
	}
	rows, err := q.QueryContext(ctx, query, nil)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	dest := make([]driver.Value, len(rows.Columns()))
	if err := rows.Next(dest); err != nil {
		return 0, fmt.Errorf("no row: %w", err)
	}
	return asInt(dest[0])
}

// asInt reads an integer column the driver returned as int64 or text.
func asInt(v driver.Value) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case []byte:
		var n int64
		_, err := fmt.Sscan(string(x), &n)
		return n, err
	}
	return 0, fmt.Errorf("unexpected value %T", v)
}

// mysqlReason words a driver error: the server's own message when it sent one.
func mysqlReason(p *probe, err error, what string) string {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return fmt.Sprintf("%s: error %d: %s", what, me.Number, me.Message)
	}
	return p.describe(err, what)
}
