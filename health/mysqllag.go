// mysqllag.go: a MySQL or MariaDB replica's lag, from SHOW REPLICA STATUS (or SHOW SLAVE STATUS).

package health

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
)

// erParseError is the server's answer to a statement it does not know.
const erParseError = 1064

// readLag asks a replica for its lag. A failed query (the user lacks
// REPLICATION CLIENT, or MariaDB's REPLICA MONITOR) leaves the lag
// unknown; one cut short by the probe's deadline fails the check.
func (ch *mysqlChecker) readLag(p *probe, conn driver.Conn) ReplicaLag {
	cols, rows, err := ch.replicaStatus(p.ctx, conn)
	if err != nil {
		if p.ctx.Err() != nil {
			p.fail("%s", mysqlReason(p, err, "reading replica lag"))
		}
		return unknownLag("%s", mysqlReason(p, err, "query failed"))
	}
	return mysqlLag(cols, rows)
}

// replicaStatus runs SHOW REPLICA STATUS, or SHOW SLAVE STATUS on a server
// too old for it (remembered).
func (ch *mysqlChecker) replicaStatus(ctx context.Context, conn driver.Conn) ([]string, [][]driver.Value, error) {
	if !ch.slaveSyntax.Load() {
		cols, rows, err := queryRows(ctx, conn, "SHOW REPLICA STATUS")
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != erParseError {
			return cols, rows, err
		}
		ch.slaveSyntax.Store(true)
	}
	return queryRows(ctx, conn, "SHOW SLAVE STATUS")
}

// queryRows runs a query on a raw driver connection and returns every row.
func queryRows(ctx context.Context, conn driver.Conn, query string) ([]string, [][]driver.Value, error) {
	q, ok := conn.(driver.QueryerContext)
	if !ok {
		return nil, nil, errors.New("driver connection cannot query")
	}
	rows, err := q.QueryContext(ctx, query, nil)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	cols := rows.Columns()
	var all [][]driver.Value
	for {
		dest := make([]driver.Value, len(cols))
		if err := rows.Next(dest); errors.Is(err, io.EOF) {
			return cols, all, nil
		} else if err != nil {
			return nil, nil, err
		}
		all = append(all, dest)
	}
}

// mysqlLag interprets SHOW REPLICA STATUS: the largest
// Seconds_Behind_Master (Seconds_Behind_Source in MySQL's new names) of
// its rows (one per source channel). No row is not a replica; a NULL, or
// an SQL thread not running, is a lag the server cannot tell (it reports
// NULL when the SQL thread is stopped, or has applied everything while
// the I/O thread is disconnected).
func mysqlLag(cols []string, rows [][]driver.Value) ReplicaLag {
	if len(rows) == 0 {
		return unknownLag("not replicating (replica status is empty)")
	}
	behind, okB := column(cols, "Seconds_Behind_Master", "Seconds_Behind_Source")
	sqlRun, okS := column(cols, "Slave_SQL_Running", "Replica_SQL_Running")
	if !okB || !okS {
		return unknownLag("replica status lacks Seconds_Behind_Master or Slave_SQL_Running")
	}
	worst := knownLag(0)
	for _, row := range rows {
		if run := text(row[sqlRun]); run != "Yes" {
			return unknownLag("SQL thread not running (%s: %s)", cols[sqlRun], run)
		}
		if row[behind] == nil {
			return unknownLag("%s is NULL", cols[behind])
		}
		secs, err := strconv.ParseInt(text(row[behind]), 10, 64)
		if err != nil {
			return unknownLag("%s is %q", cols[behind], text(row[behind]))
		}
		worst.Lag = max(worst.Lag, time.Duration(secs)*time.Second)
	}
	return worst
}

// column finds the first of names among cols.
func column(cols []string, names ...string) (int, bool) {
	for _, n := range names {
		for i, c := range cols {
			if c == n {
				return i, true
			}
		}
	}
	return 0, false
}

// text is a column value the text protocol returned ("" for NULL).
func text(v driver.Value) string {
	switch x := v.(type) {
	case []byte:
		return string(x)
	case string:
		return x
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}
