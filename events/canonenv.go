package events

import (
	"bytes"
	"encoding/binary"
	"time"
)

// Nearly every record decoded was written by [Encode] or ingest: its
// envelope is the canonical layout, byte for byte,
//
//	{"id":"…","run":"…","type":"…","v":N,"at":"…","source":"…","data":{…}}
//
// with strings that need no escape. canonicalEnvelope reads such an
// envelope by matching that layout, without the general decoder's
// reflection, and checks what the general path checks of it. It accepts
// only an envelope the general path accepts with the same values, and
// reports false for anything else (another order, white space, an escape,
// a value the rules refuse), which then takes the general path and gets
// its error there: the fast path changes no verdict and no error
// (docs/design.md §2.5).

// envelopeLayout is the canonical envelope's text between its values.
var envelopeLayout = [...]string{`{"id":"`, `","run":"`, `","type":"`, `","v":`, `,"at":"`, `","source":"`, `","data":`}

// canonicalEnvelope reads record's envelope as the general path would, when
// record has the canonical layout. With validData the record's own
// validation has not run, and the data must be proved valid JSON nesting
// no deeper than [MaxDepth] (the text around it is valid JSON by its
// layout, so that the record is, and checkDepth would pass it): data that
// is not an object is proved here; an object is left to the decoding of
// the data, which validates it as it cuts its members, and unchecked says
// so (see decodeFast).
func canonicalEnvelope(record []byte, st *decodeState, validData bool) (env envelope, at time.Time, ok, unchecked bool) {
	// The values' spans in record: id, run, type, v, at, source.
	var span [6][2]int
	i := 0
	for f, lit := range envelopeLayout[:6] {
		if !hasPrefixAt(record, i, lit) {
			return env, at, false, false
		}
		i += len(lit)
		start := i
		if f == 3 { // v: an integer of 1 to 4 digits, without a leading zero
			for i < len(record) && i-start < 5 && record[i] >= '0' && record[i] <= '9' {
				i++
			}
			if n := i - start; n == 0 || n > 4 || record[start] == '0' {
				return env, at, false, false
			}
		} else {
			j := bytes.IndexByte(record[i:], '"')
			if j < 0 {
				return env, at, false, false
			}
			i += j
			if !plainText(record[start:i]) {
				return env, at, false, false
			}
		}
		span[f] = [2]int{start, i}
	}
	if !hasPrefixAt(record, i, envelopeLayout[6]) || record[len(record)-1] != '}' {
		return env, at, false, false
	}
	// The general path trims the data's white space too: JSON's four
	// characters of it, not every byte bytes.TrimSpace takes (a form feed
	// before the data makes the record malformed JSON).
	data := record[i+len(envelopeLayout[6]) : len(record)-1]
	start, end := skipSpace(data, 0), len(data)
	for end > start && isSpace(data[end-1]) {
		end--
	}
	data = data[start:end]
	if len(data) == 0 || isNull(data) {
		return env, at, false, false // the general path refuses a null at the envelope
	}
	switch {
	case validData && data[0] == '{':
		unchecked = true
	case validData:
		// The envelope is the one object around the data.
		if !validJSON(data, st.dataDepth()) {
			return env, at, false, false
		}
	case skipValue(data, 0) != len(data):
		// Valid JSON, but the data is not the last member.
		return env, at, false, false
	}
	// One string for the envelope's text, its fields slices of it: one
	// allocation rather than one a field.
	text := string(record[span[0][0]:span[5][1]])
	str := func(f int) string { return text[span[f][0]-span[0][0] : span[f][1]-span[0][0]] }
	id, run, typ, atText, source := str(0), str(1), str(2), str(4), str(5)
	v := 0
	for _, c := range record[span[3][0]:span[3][1]] {
		v = v*10 + int(c-'0')
	}
	// The checks of the general path: each field's text (checkText: not
	// empty, no NUL, which plainText excludes) and the rules (the id a
	// UUID, here in lower case as the canonical form writes it, the run a
	// run id, at an RFC 3339 time, the source an entity id, and for a new
	// fact no "." or ".." segment in it). The run's, the source's and the
	// time's checks bound their length below MaxTextBytes; the id's is 36.
	// An id with upper case takes the general path, which lowers it.
	if !isLowerUUID(id) || !ValidRunID(run) || typ == "" || len(typ) > MaxTextBytes || !ValidEntityID(source) ||
		st != nil && st.ingest && hasDotSegment(source) {
		return env, at, false, false
	}
	at, ok, inRange := parseTime(atText)
	if !ok || !inRange {
		return env, at, false, false
	}
	return envelope{ID: id, Run: run, Type: Type(typ), V: v, At: atText, Source: source, Data: data}, at, true, unchecked
}

func hasPrefixAt(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

// plainText reports whether b is the text of a JSON string as it stands:
// no escape, no control character (which JSON refuses unescaped).
func plainText(b []byte) bool {
	// Eight bytes at a time (the envelope's ids and times); the quote is
	// where the caller's search stopped.
	i := 0
	for ; len(b)-i >= 8; i += 8 {
		if escapeBytes(binary.LittleEndian.Uint64(b[i:])) != 0 {
			return false
		}
	}
	for _, c := range b[i:] {
		if c < 0x20 || c == '\\' {
			return false
		}
	}
	return true
}
