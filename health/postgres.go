// postgres.go: the postgres check: an SSLRequest handshake, or a pgx login that checks the role.

package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/l4lb/l4lb/l4"
)

// sslRequest is PostgreSQL's SSLRequest: length 8, code 80877103. Every
// server since 7.x answers it with one byte, 'S' or 'N', before any
// authentication, so it proves the postmaster accepts and forks without
// needing credentials.
var sslRequest = []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}

// postgresChecker without a user sends the SSLRequest and closes: after
// 'N' the server sees EOF where the startup packet would be and logs
// nothing; after 'S' (ssl=on) it expects a TLS ClientHello and logs "could
// not accept SSL connection: EOF detected" for every probe; configure a
// user there. With a user it logs in with pgx and runs
// SELECT pg_is_in_recovery() to learn the role (true = replica).
type postgresChecker struct {
	connOpts
	role    l4.DBRole
	maxLag  time.Duration
	user    string
	pass    string
	db      string
	sslmode string
}

func newPostgres(s Spec) *postgresChecker {
	return &postgresChecker{connOpts: optsOf(s), role: s.Role, maxLag: s.MaxLag, user: s.User,
		pass: s.Password, db: s.Database, sslmode: s.PostgresSSLMode}
}

func (ch *postgresChecker) Check(ctx context.Context, addr netip.AddrPort) Result {
	if ch.user != "" {
		p := begin(ctx, ch.connOpts)
		ch.login(p, addr)
		return p.end(nil)
	}
	return overConn(ctx, ch.connOpts, addr, ch.sslRequest)
}

// sslRequest sends the SSLRequest and judges the one-byte answer.
func (ch *postgresChecker) sslRequest(p *probe, c net.Conn) {
	if _, err := c.Write(sslRequest); err != nil {
		p.failErr(err, "sending SSLRequest")
		return
	}
	fb := p.sent(c)
	var b [1]byte
	_, err := io.ReadFull(fb, b[:])
	p.replied(fb)
	switch {
	case err != nil:
		p.failErr(err, "waiting for SSLRequest reply")
	case b[0] == 'S' || b[0] == 'N':
		p.pass()
	case b[0] == 'E':
		p.fail("error response to SSLRequest")
	default:
		p.fail("unexpected reply %q to SSLRequest (not PostgreSQL?)", b[0])
	}
}

// login connects with pgx, asks for the role and checks it.
func (ch *postgresChecker) login(p *probe, addr netip.AddrPort) {
	cfg, err := pgx.ParseConfig(ch.connString(addr))
	if err != nil {
		p.fail("postgres config: %v", err)
		return
	}
	cfg.DialFunc = p.timedDialFunc(addr)
	conn, err := pgx.ConnectConfig(p.ctx, cfg)
	if err != nil {
		p.fail("%s", ch.reason(p, err, "logging in"))
		return
	}
	defer closePgx(conn)
	sent := time.Now()
	var inRecovery bool
	err = conn.QueryRow(p.ctx, "SELECT pg_is_in_recovery()", pgx.QueryExecModeSimpleProtocol).Scan(&inRecovery)
	if err != nil {
		p.fail("%s", ch.reason(p, err, "querying pg_is_in_recovery()"))
		return
	}
	p.res.FirstByte = time.Since(sent)
	role := l4.RolePrimary
	if inRecovery {
		role = l4.RoleReplica
	}
	checkRole(p, role, ch.role)
	if ch.role == l4.RoleReplica && p.res.OK {
		judgeLag(p, ch.readLag(p, conn), ch.maxLag)
	}
}

// lagQuery reads what pgLagRow needs in one round trip. Every function
// and view in it is readable by any user; pg_stat_wal_receiver shows a
// user without pg_read_all_stats the receiver's pid but not its status.
const lagQuery = `SELECT (SELECT count(*) FROM pg_stat_wal_receiver) > 0,
 (SELECT status FROM pg_stat_wal_receiver),
 coalesce(pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn(), false),
 extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8`

// readLag asks a replica for its lag. A failed query leaves the lag
// unknown; one cut short by the probe's deadline fails the check.
func (ch *postgresChecker) readLag(p *probe, conn *pgx.Conn) ReplicaLag {
	var r pgLagRow
	err := conn.QueryRow(p.ctx, lagQuery, pgx.QueryExecModeSimpleProtocol).Scan(&r.receiver, &r.status, &r.caughtUp, &r.replayAge)
	if err != nil {
		if p.ctx.Err() != nil {
			p.fail("%s", ch.reason(p, err, "reading replica lag"))
		}
		return unknownLag("%s", ch.reason(p, err, "query failed"))
	}
	return r.lag()
}

// pgLagRow is a PostgreSQL replica's answer to lagQuery.
type pgLagRow struct {
	receiver  bool     // a WAL receiver process runs
	status    *string  // its status; nil when the user may not see it
	caughtUp  bool     // the WAL received is all replayed
	replayAge *float64 // seconds since the last replayed transaction committed on the primary; nil: none replayed
}

// lag interprets the row. Without a streaming WAL receiver the replica
// hears nothing new from its primary, so "all received is replayed"
// proves nothing: unknown. Streaming and caught up is no lag, however
// long the primary has been idle (the guard the replay timestamp alone
// lacks: it ages while nothing happens). Otherwise the lag is the age of
// the last replayed commit, by the replica's clock against the
// primary's.
func (r pgLagRow) lag() ReplicaLag {
	switch {
	case !r.receiver:
		return unknownLag("no WAL receiver: not streaming from a primary")
	case r.status != nil && *r.status != "streaming":
		return unknownLag("WAL receiver %s, not streaming", *r.status)
	case r.caughtUp:
		return knownLag(0)
	case r.replayAge == nil:
		return unknownLag("no transaction replayed since the server started")
	}
	return knownLag(time.Duration(*r.replayAge * float64(time.Second)))
}

// connString builds a URL so that user, password and database need no
// escaping rules of their own. The database defaults to "postgres", which
// every cluster has (libpq would default to the user's name).
func (ch *postgresChecker) connString(addr netip.AddrPort) string {
	db := ch.db
	if db == "" {
		db = "postgres"
	}
	u := url.URL{Scheme: "postgres", Host: addr.String(), Path: "/" + db,
		User: url.UserPassword(ch.user, ch.pass)}
	q := url.Values{"sslmode": {ch.sslmode}, "application_name": {"l4lb-health"}}
	u.RawQuery = q.Encode()
	return u.String()
}

// reason words a pgx error: the server's own message when it sent one.
func (ch *postgresChecker) reason(p *probe, err error, what string) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%s: %s (SQLSTATE %s)", what, pe.Message, pe.Code)
	}
	return p.describe(err, what)
}

// closePgx sends Terminate and closes, even when the probe's time is up:
// a connection dropped without Terminate is logged by the server.
func closePgx(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	_ = conn.Close(ctx)
}

// timedDialFunc is a driver dial hook that records the first handshake of
// the probe. Drivers may dial twice (sslmode=prefer falls back to plain);
// the address they pass is ignored in favour of the probe's.
func (p *probe) timedDialFunc(addr netip.AddrPort) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		c, rtt, kernel, err := dialTimed(ctx, addr, p.proxy, p.route)
		if err == nil && p.res.Connect == 0 {
			p.res.Connect, p.res.KernelRTT = rtt, kernel
		}
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}

// checkRole passes when the server's role is the wanted one (or any).
func checkRole(p *probe, got, want l4.DBRole) {
	if want != l4.RoleAny && got != want {
		p.fail("role %s, want %s", got, want)
		return
	}
	p.pass()
}
