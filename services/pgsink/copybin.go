package pgsink

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Rows reach the tables by COPY in PostgreSQL's binary format
// (docs/design.md §13). pgx's CopyFrom encodes a table's rows while its
// COPY runs, the transaction waiting on them, and finds an encoding plan
// for every value. The sink instead encodes a window's rows
// as it decodes them, on every core, while the previous window is being
// written: each column's type is known from the session's description of
// its table, and the common values (text, integers, floats, booleans,
// times, UUIDs, NULL) are written directly, in the bytes pgx would write.
// Anything else (arrays, say) goes through pgx's own encoding; a table
// whose rows do not all encode is copied by pgx.CopyFrom, as before.

// copyPlan is what a session knows of its tables for COPY: the type of
// each of a table's own columns, and its COPY statement.
type copyPlan struct {
	oids [numTables][]uint32
	sql  [numTables]string
}

// describeTables reads the column types of the tables in schema, as pgx's
// CopyFrom does: from the description of a query of the columns.
func describeTables(ctx context.Context, conn *pgx.Conn, schema string) (*copyPlan, error) {
	p := &copyPlan{}
	for id := range numTables {
		t := &tables[id]
		name := pgx.Identifier{schema, t.name}.Sanitize()
		quoted := make([]string, len(t.cols))
		for i, c := range t.cols {
			quoted[i] = pgx.Identifier{c}.Sanitize()
		}
		cols := strings.Join(quoted, ", ")
		sd, err := conn.Prepare(ctx, "", fmt.Sprintf("SELECT %s FROM %s", cols, name))
		if err != nil {
			return nil, fmt.Errorf("describe %s: %w", t.name, err)
		}
		if len(sd.Fields) != len(t.cols) {
			return nil, fmt.Errorf("describe %s: %d columns, want %d", t.name, len(sd.Fields), len(t.cols))
		}
		p.oids[id] = make([]uint32, len(sd.Fields))
		for i, f := range sd.Fields {
			p.oids[id][i] = f.DataTypeOID
		}
		p.sql[id] = fmt.Sprintf("COPY %s (%s) FROM STDIN (FORMAT binary)", name, cols)
	}
	return p, nil
}

// copyHeader and copyTrailer begin and end a binary COPY stream: the
// signature, no flags, no header extension; a tuple of -1 fields.
var (
	copyHeader  = []byte("PGCOPY\n\377\r\n\000\000\000\000\000\000\000\000\000")
	copyTrailer = []byte{0xff, 0xff}
)

// typeMaps lends pgtype.Maps, which cache plans and are not safe for
// concurrent use, to the goroutines encoding rows.
var typeMaps = sync.Pool{New: func() any { return pgtype.NewMap() }}

// encode encodes the rows of every table of rs (the table's own columns of
// each) as binary COPY tuples, into rs.enc; a table with a row that does
// not encode is left without (rs.encFailed), for pgx.CopyFrom to copy.
func (rs *rowSet) encode(p *copyPlan) {
	m := typeMaps.Get().(*pgtype.Map)
	defer typeMaps.Put(m)
	for id := range numTables {
		rows := rs.rows[id]
		if len(rows) == 0 {
			continue
		}
		oids := p.oids[id]
		buf := make([]byte, 0, 64*len(rows)*len(oids)/4)
		var err error
		for _, row := range rows {
			if buf, err = appendTuple(buf, m, oids, row); err != nil {
				break
			}
		}
		if err != nil {
			rs.encFailed[id] = true
			continue
		}
		rs.enc[id] = buf
	}
}

// appendTuple appends row's first len(oids) values as one tuple.
func appendTuple(buf []byte, m *pgtype.Map, oids []uint32, row []any) ([]byte, error) {
	if len(row) < len(oids) {
		return nil, fmt.Errorf("a row of %d values for %d columns", len(row), len(oids))
	}
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(oids)))
	var err error
	for i, oid := range oids {
		if buf, err = appendField(buf, m, oid, row[i]); err != nil {
			return nil, err
		}
	}
	return buf, nil
}

// microsecFromUnixEpochToY2K is where PostgreSQL's times count from.
const microsecFromUnixEpochToY2K = 946684800 * 1000000

// appendField appends v as a field of a column of type oid: its length,
// -1 for NULL, and its binary form.
func appendField(buf []byte, m *pgtype.Map, oid uint32, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return appendInt32(buf, -1), nil
	case string:
		switch oid {
		case pgtype.TextOID, pgtype.VarcharOID:
			return append(appendInt32(buf, int32(len(v))), v...), nil
		case pgtype.JSONBOID:
			// The jsonb binary format is a version byte, 1, then the text.
			return append(append(appendInt32(buf, int32(len(v)+1)), 1), v...), nil
		}
	case int64:
		if b, ok := appendInt(buf, oid, v); ok {
			return b, nil
		}
	case int32:
		if b, ok := appendInt(buf, oid, int64(v)); ok {
			return b, nil
		}
	case float64:
		if oid == pgtype.Float8OID {
			return binary.BigEndian.AppendUint64(appendInt32(buf, 8), math.Float64bits(v)), nil
		}
	case bool:
		if oid == pgtype.BoolOID {
			b := byte(0)
			if v {
				b = 1
			}
			return append(appendInt32(buf, 1), b), nil
		}
	case time.Time:
		if oid == pgtype.TimestamptzOID {
			// As pgx writes a finite timestamptz: microseconds, truncated.
			us := v.Unix()*1000000 + int64(v.Nanosecond())/1000 - microsecFromUnixEpochToY2K
			return binary.BigEndian.AppendUint64(appendInt32(buf, 8), uint64(us)), nil
		}
	case pgtype.UUID:
		if oid == pgtype.UUIDOID {
			if !v.Valid {
				return appendInt32(buf, -1), nil
			}
			return append(appendInt32(buf, 16), v.Bytes[:]...), nil
		}
	}
	// pgx's own encoding, as its CopyFrom calls it.
	at := len(buf)
	buf = appendInt32(buf, -1)
	out, err := m.Encode(oid, pgtype.BinaryFormatCode, v, buf)
	if err != nil {
		return nil, err
	}
	if out == nil { // NULL
		return buf, nil
	}
	binary.BigEndian.PutUint32(out[at:], uint32(len(out)-at-4))
	return out, nil
}

// appendInt appends an integer to a column of 2, 4 or 8 bytes, when it
// fits; ok is false otherwise, for pgx to refuse it with its own error.
func appendInt(buf []byte, oid uint32, v int64) ([]byte, bool) {
	switch oid {
	case pgtype.Int8OID:
		return binary.BigEndian.AppendUint64(appendInt32(buf, 8), uint64(v)), true
	case pgtype.Int4OID:
		if v >= math.MinInt32 && v <= math.MaxInt32 {
			return binary.BigEndian.AppendUint32(appendInt32(buf, 4), uint32(int32(v))), true
		}
	case pgtype.Int2OID:
		if v >= math.MinInt16 && v <= math.MaxInt16 {
			return binary.BigEndian.AppendUint16(appendInt32(buf, 2), uint16(int16(v))), true
		}
	}
	return buf, false
}

func appendInt32(buf []byte, n int32) []byte { return binary.BigEndian.AppendUint32(buf, uint32(n)) }

// encoded is the binary COPY stream of the window's rows of table id, and
// how many rows it holds; ok is false when some rows did not encode (or
// the window was prepared without a plan), and pgx.CopyFrom must copy them.
func (w *window) encoded(id tableID) (r io.Reader, rows int, ok bool) {
	parts := []io.Reader{bytes.NewReader(copyHeader)}
	for _, rs := range w.rows {
		if rs.encFailed[id] || len(rs.rows[id]) > 0 && rs.enc[id] == nil {
			return nil, 0, false
		}
		if len(rs.enc[id]) > 0 {
			parts = append(parts, bytes.NewReader(rs.enc[id]))
			rows += len(rs.rows[id])
		}
	}
	return io.MultiReader(append(parts, bytes.NewReader(copyTrailer))...), rows, true
}
