package events

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// parseTimeByTimeParse is parseTime as it was before parseUTC read the
// canonical form itself: time.Parse, held to strictRFC3339's grammar.
func parseTimeByTimeParse(s string) (at time.Time, ok, inRange bool) {
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || !strictRFC3339(s) {
		return time.Time{}, false, false
	}
	y := at.UTC().Year()
	return at, true, y >= 0 && y <= 9999
}

// TestParseTimeAsTimeParse: reading a UTC time field by field accepts
// exactly the times time.Parse accepts in that form, as the same instant
// and location, and leaves every other form to it. Days past a month's
// end, 24:00, a leap second and Februaries of century years are where a
// hand-written reader goes wrong.
func TestParseTimeAsTimeParse(t *testing.T) {
	check := func(s string) {
		t.Helper()
		got, ok, inRange := parseTime(s)
		want, wok, winRange := parseTimeByTimeParse(s)
		if !ok {
			got = time.Time{}
		}
		if ok != wok || inRange != winRange || !got.Equal(want) || got.String() != want.String() || (got.Location() == time.UTC) != (want.Location() == time.UTC) {
			t.Fatalf("%q: got %v %v %v, time.Parse gives %v %v %v", s, got, ok, inRange, want, wok, winRange)
		}
	}
	for _, s := range []string{
		"2026-12-07T12:00:00Z", "2026-12-07T12:00:00.5Z", "2026-12-07T12:00:00.123456789Z", "2026-12-07T12:00:00.000000001Z",
		"2026-12-07T12:00:00.1234567890Z", "2026-12-07T12:00:00.Z", "2026-12-07T12:00:00z", "2026-12-07T12:00:00+00:00",
		"2026-12-07T12:00:00.5+05:30", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z", "0000-01-01T00:30:00+01:00",
		"2026-02-29T00:00:00Z", "2024-02-29T00:00:00Z", "2000-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2026-02-30T00:00:00Z",
		"2026-04-31T00:00:00Z", "2026-04-30T00:00:00Z", "2026-12-32T00:00:00Z", "2026-13-01T00:00:00Z", "2026-00-01T00:00:00Z",
		"2026-01-00T00:00:00Z", "2026-12-07T24:00:00Z", "2026-12-07T23:60:00Z", "2026-12-07T23:59:60Z", "2026-12-07T23:59:59Z",
		"2026-12-07 12:00:00Z", "2026-12-07T12:00:00", "", "Z", "2026-12-07T12:00:00ZZ", "2026-12-07T1:00:00Z",
	} {
		check(s)
	}
	// Every field drawn from its digits' whole range, so that most are
	// out of range somewhere; some with a fraction.
	r := rand.New(rand.NewPCG(7, 12))
	for range 200_000 {
		s := fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d", r.IntN(10000), r.IntN(100), r.IntN(100), r.IntN(100), r.IntN(100), r.IntN(100))
		if r.IntN(3) == 0 {
			s = fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d", r.IntN(10000), 1+r.IntN(12), 1+r.IntN(31), r.IntN(25), r.IntN(61), r.IntN(61))
		}
		if r.IntN(2) == 0 {
			n := 1 + r.IntN(10)
			s += "." + fmt.Sprintf("%010d", r.Int64N(10_000_000_000))[:n]
		}
		check(s + "Z")
	}
}

// TestPlainTextAsBytes: the word-at-a-time test for a byte that needs an
// escape takes what the byte loop takes, wherever in a word the byte is.
func TestPlainTextAsBytes(t *testing.T) {
	byBytes := func(b []byte) bool {
		for _, c := range b {
			if c < 0x20 || c == '\\' {
				return false
			}
		}
		return true
	}
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte{0, 0x1f, 0x20, '\\', '"', 'a', '0', 0x7f, 0x80, 0xc3, 0xa9, 0xff, 0x5b, 0x5d, 0x1c}
	for range 200_000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = 'a' + byte(r.IntN(26))
			if r.IntN(12) == 0 {
				b[i] = alphabet[r.IntN(len(alphabet))]
			}
		}
		if got, want := plainText(b), byBytes(b); got != want {
			t.Fatalf("%q: got %v, the byte loop %v", b, got, want)
		}
	}
}

// TestParseIntAsStrconv: the integer reader gives strconv.ParseInt's
// value, and refuses what it refuses, for the JSON integers a field may
// hold, at the edges of int32 and int64.
func TestParseIntAsStrconv(t *testing.T) {
	check := func(s string, bits int) {
		t.Helper()
		got, ok := parseInt([]byte(s), bits)
		want, err := strconv.ParseInt(s, 10, bits)
		if ok != (err == nil) || ok && got != want {
			t.Fatalf("%q (%d bits): got %d %v, strconv %d %v", s, bits, got, ok, want, err)
		}
	}
	for _, bits := range []int{32, 64} {
		for _, s := range []string{"0", "-0", "7", "-7", "2147483647", "2147483648", "-2147483648", "-2147483649",
			"999999999999999999", "-999999999999999999", "1000000000000000000", "9223372036854775807", "9223372036854775808",
			"-9223372036854775808", "-9223372036854775809", "", "-", "12a", "1-2"} {
			check(s, bits)
		}
		r := rand.New(rand.NewPCG(5, uint64(bits)))
		for range 100_000 {
			s := strconv.FormatUint(r.Uint64()>>r.IntN(64), 10)
			if r.IntN(2) == 0 {
				s = "-" + s
			}
			check(s, bits)
		}
	}
}

// TestFastPathCountsTheBatchArray: the fast path bounds a fact's nesting
// as it validates the data, counting the arrays around its record, so
// that a batch it takes is one checkDepth passes without being scanned
// by it. A record whose data nests to the limit alone is read (and
// refused for its unknown member, a refusal that stands); inside a
// batch's array it is one level too deep, and left to the general path,
// whose checkDepth refuses it as malformed.
func TestFastPathCountsTheBatchArray(t *testing.T) {
	// The record's object, the data's, then n arrays.
	n := MaxDepth - 2
	deep := strings.Repeat("[", n) + "1" + strings.Repeat("]", n)
	record := []byte(`{"id":"0190c0de-0000-7000-8000-000000000001","run":"run-1","type":"attempt.failed","v":1,"at":"2026-11-29T19:10:00Z","source":"engine-1","data":{"zzz":` + deep + `}}`)
	if fe := checkDepth(record); fe != nil {
		t.Fatalf("the record alone nests too deep for checkDepth: %v", fe)
	}
	if fe := checkDepth(append(append([]byte{'['}, record...), ']')); fe == nil {
		t.Fatal("checkDepth passes the record in an array")
	}
	_, fe, ok := decodeFast(record, &decodeState{ingest: true})
	if !ok || fe == nil || fe.Err != ErrUnknownField {
		t.Fatalf("alone: got %v (taken %v), want the fast path's refusal of the unknown member", fe, ok)
	}
	if _, fe, ok := decodeFast(record, &decodeState{ingest: true, enclosing: 1}); ok {
		t.Fatalf("in a batch's array: the fast path took it (%v); want it left to checkDepth", fe)
	}
	body := append(append([]byte{'['}, record...), ']')
	if _, err := DecodeBatch(body); !errors.Is(err, ErrMalformed) {
		t.Fatalf("the batch: got %v, want malformed", err)
	}
}
