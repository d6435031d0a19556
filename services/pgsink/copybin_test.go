package pgsink

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// pgxField is a field as pgx's CopyFrom writes it (encodeCopyValue): the
// oracle of appendField's direct paths.
func pgxField(t *testing.T, m *pgtype.Map, oid uint32, v any) []byte {
	t.Helper()
	buf := binary.BigEndian.AppendUint32(nil, math.MaxUint32) // -1
	out, err := m.Encode(oid, pgtype.BinaryFormatCode, v, buf)
	if err != nil {
		t.Fatalf("pgx encodes %T %v for oid %d: %v", v, v, oid, err)
	}
	if out == nil {
		return buf
	}
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}

// Every value the sink's rows hold, in every column type it is written to,
// encodes to the bytes pgx writes for it.
func TestAppendFieldAsPgx(t *testing.T) {
	m := pgtype.NewMap()
	at := time.Date(2026, 12, 6, 21, 40, 1, 123456789, time.FixedZone("x", 5*3600))
	cases := []struct {
		oid uint32
		v   any
	}{
		{pgtype.TextOID, ""}, {pgtype.TextOID, "attempt-1 é"}, {pgtype.VarcharOID, "x"},
		{pgtype.JSONBOID, `{"a":[1,2]}`}, {pgtype.JSONBOID, `{}`},
		{pgtype.Int8OID, int64(0)}, {pgtype.Int8OID, int64(-1)}, {pgtype.Int8OID, int64(math.MaxInt64)}, {pgtype.Int8OID, int64(math.MinInt64)},
		{pgtype.Int8OID, int32(-7)}, {pgtype.Int4OID, int32(math.MinInt32)}, {pgtype.Int4OID, int32(42)},
		{pgtype.Int4OID, int64(math.MaxInt32)}, {pgtype.Int2OID, int64(-300)}, {pgtype.Int2OID, int32(math.MaxInt16)},
		{pgtype.Float8OID, 0.0}, {pgtype.Float8OID, -1.5}, {pgtype.Float8OID, math.Inf(1)}, {pgtype.Float8OID, math.NaN()},
		{pgtype.Float8OID, math.Copysign(0, -1)},
		{pgtype.BoolOID, true}, {pgtype.BoolOID, false},
		{pgtype.TimestamptzOID, at}, {pgtype.TimestamptzOID, at.UTC()}, {pgtype.TimestamptzOID, time.Unix(0, 999).UTC()},
		{pgtype.TimestamptzOID, time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC)},
		{pgtype.UUIDOID, pgtype.UUID{Bytes: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, Valid: true}},
		{pgtype.UUIDOID, pgtype.UUID{}},
		{pgtype.Int8OID, nil}, {pgtype.TextOID, nil},
		// Through pgx's own encoding.
		{pgtype.Int8ArrayOID, []int64{1, 2, 3}}, {pgtype.TextArrayOID, []string{"a", "b"}},
		{pgtype.TextArrayOID, []pgtype.Text{{String: "a", Valid: true}, {}}}, {pgtype.Float4OID, float32(0.25)},
		{pgtype.NumericOID, 1.25},
	}
	for _, c := range cases {
		got, err := appendField(nil, m, c.oid, c.v)
		if err != nil {
			t.Fatalf("%T %v for oid %d: %v", c.v, c.v, c.oid, err)
		}
		if want := pgxField(t, m, c.oid, c.v); !bytes.Equal(got, want) {
			t.Errorf("%T %v for oid %d:\n got %x\nwant %x", c.v, c.v, c.oid, got, want)
		}
	}
}

// A value that does not fit its column is refused, as pgx refuses it,
// so that its table is copied by pgx.CopyFrom and fails there.
func TestAppendFieldRefuses(t *testing.T) {
	m := pgtype.NewMap()
	for _, c := range []struct {
		oid uint32
		v   any
	}{
		{pgtype.Int4OID, int64(math.MaxInt32) + 1}, {pgtype.Int2OID, int32(math.MinInt16) - 1}, {pgtype.BoolOID, "yes"},
	} {
		if _, err := appendField(nil, m, c.oid, c.v); err == nil {
			t.Errorf("%T %v for oid %d encoded", c.v, c.v, c.oid)
		}
	}
}

// The stream's frame is the binary COPY format's: the 11-byte signature,
// no flags, no header extension, and a -1 field count to end it.
func TestCopyFrame(t *testing.T) {
	want := append([]byte("PGCOPY\n\xff\r\n\x00"), make([]byte, 8)...)
	if !bytes.Equal(copyHeader, want) {
		t.Fatalf("header %x, want %x", copyHeader, want)
	}
	if !bytes.Equal(copyTrailer, []byte{0xff, 0xff}) {
		t.Fatalf("trailer %x", copyTrailer)
	}
}

// A table with a row that does not encode goes to pgx.CopyFrom whole; the
// others are copied from their encoded tuples.
func TestWindowEncodedFallsBack(t *testing.T) {
	plan := &copyPlan{}
	plan.oids[tSkipped] = []uint32{pgtype.TextOID, pgtype.Int4OID, pgtype.Int8OID, pgtype.TextOID}
	plan.oids[tGroupClosures] = []uint32{pgtype.TextOID}
	good, bad := &rowSet{}, &rowSet{}
	good.add(tSkipped, "facts", int32(0), int64(7), "why")
	bad.add(tSkipped, "facts", int64(math.MaxInt32)+1, int64(8), "why")
	good.add(tGroupClosures, "g")
	good.encode(plan)
	bad.encode(plan)
	w := &window{rows: []*rowSet{good, bad}}
	if _, _, ok := w.encoded(tSkipped); ok {
		t.Fatal("a table with a row that does not encode was encoded")
	}
	if _, n, ok := w.encoded(tGroupClosures); !ok || n != 1 {
		t.Fatalf("encoded %d rows, %v; want 1, true", n, ok)
	}
	if _, _, ok := (&window{rows: []*rowSet{{rows: good.rows}}}).encoded(tSkipped); ok {
		t.Fatal("rows prepared without a plan were taken as encoded")
	}
}
