package events

import (
	"bytes"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	json "github.com/segmentio/encoding/json"

	"github.com/google/uuid"
)

// MaxRecordBytes bounds one event's canonical encoding: the Kafka record.
const MaxRecordBytes = 1 << 20

// MaxDepth bounds how deeply a body's arrays and objects may nest. A valid
// request nests at most five deep (array, envelope, data, config, pass_band);
// the bound is far above that so that ordinary mistakes keep their precise
// error, and far below the depth at which a recursive JSON parser exhausts
// its goroutine's stack, which is fatal to the whole process, not a panic.
const MaxDepth = 1000

// Event is one fact: the envelope and its typed data.
type Event struct {
	// ID is the producer's UUID for the fact, its idempotency key.
	ID string
	// Run names the run; it is the Kafka key.
	Run string
	// Type and V name the catalogue entry of the record: V is the schema
	// version it was written at, and is written at (docs/design.md §18.5).
	Type Type
	V    int
	// At is the producer's clock: informational, never read by projections.
	At time.Time
	// Source is the producer's identity (engine, worker, trainer, scheduler).
	Source string
	// Data is the fact itself, Type's struct (the newest version's shape)
	// whatever V is.
	Data Fact
}

// New returns an event of data's type at its current schema version, with a
// fresh UUIDv7 id.
func New(run, source string, at time.Time, data Fact) Event {
	return Event{ID: NewID(), Run: run, Type: data.FactType(), V: CurrentVersion(data.FactType()), At: at, Source: source, Data: data}
}

// envelope is the wire form of an event, used both to decode strictly (the
// `rl` tags) and to encode canonically (field order).
type envelope struct {
	ID     string          `json:"id"`
	Run    string          `json:"run"`
	Type   Type            `json:"type"`
	V      int             `json:"v"`
	At     string          `json:"at"`
	Source string          `json:"source" rl:"id"`
	Data   json.RawMessage `json:"data"`
}

// The envelope's id, run and at are checked once the whole envelope has
// decoded, before its type selects the data's schema.
func (*envelope) ruleSet() ruleSet {
	return ruleSet{rules: []rule{
		{Field: "id", Format: "uuid"},
		{Field: "run", Format: "run-id"},
		{Field: "at", Format: "date-time"},
	}}
}

// formats are the named checks of strings that rules may require.
var formats = map[string]format{
	"uuid": {
		check: func(s string) string {
			if !isUUID(s) {
				return fmt.Sprintf("%q is not a UUID (8-4-4-4-12 hex)", clip(s))
			}
			return ""
		},
		pattern:     uuidPattern,
		complete:    true,
		description: "an RFC 9562 UUID of the RFC 4122 variant, 8-4-4-4-12 hex digits of either case",
	},
	"run-id": {
		check: func(s string) string {
			if !ValidRunID(s) {
				return fmt.Sprintf("%q is not a run id ([A-Za-z0-9._-]{1,128}, not . or ..)", clip(s))
			}
			return ""
		},
		pattern:     runIDPattern,
		complete:    true,
		description: "[A-Za-z0-9._-]{1,128}, neither . nor ..",
	},
	"date-time": {
		check: func(s string) string {
			if _, ok, inRange := parseTime(s); !ok {
				return fmt.Sprintf("%q is not an RFC 3339 time", clip(s))
			} else if !inRange {
				return fmt.Sprintf("%q is outside years 0000-9999 in UTC", clip(s))
			}
			return ""
		},
		pattern:  timePattern,
		complete: false,
		description: "an RFC 3339 date-time as the pattern writes it, naming a real date and time " +
			"(month 1-12, a day the month has, hour 0-23, minute 0-59, second 0-59), " +
			"within years 0000-9999 once converted to UTC",
	},
}

// isUUID is the "uuid" format's check: 8-4-4-4-12 hex digits of the RFC
// 4122 variant.
func isUUID(s string) bool {
	id, err := uuid.Parse(s)
	return err == nil && len(s) == 36 && id.Variant() == uuid.RFC4122
}

// isLowerUUID is isUUID of a UUID written in lower case, the canonical
// form: hex digits in groups of 8, 4, 4, 4 and 12 joined by hyphens, the
// variant's (the fourth group's first digit) 8, 9, a or b.
func isLowerUUID(s string) bool {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return false
	}
	var all uint8 = classLowerHex
	for i := range 8 {
		all &= byteClass[s[i]] & byteClass[s[28+i]]
	}
	for _, i := range [...]int{9, 10, 11, 12, 14, 15, 16, 17, 19, 20, 21, 22, 24, 25, 26, 27} {
		all &= byteClass[s[i]]
	}
	if all == 0 {
		return false
	}
	switch s[19] {
	case '8', '9', 'a', 'b':
		return true
	}
	return false
}

// parseTime is the "date-time" format's reading of s: ok when s is an RFC
// 3339 time as strictRFC3339 writes it, inRange when it is also within
// years 0000-9999 in UTC. The canonical form writes `at` in UTC; an offset
// that moves it out of those years would encode to a time RFC 3339 cannot
// express.
func parseTime(s string) (at time.Time, ok, inRange bool) {
	if at, ok := parseUTC(s); ok {
		return at, true, true
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || !strictRFC3339(s) {
		return at, false, false
	}
	y := at.UTC().Year()
	return at, true, y >= 0 && y <= 9999
}

// parseUTC is parseTime of a time in the form the canonical encoding
// writes, in UTC with a "Z", read field by field: ok when s is that form
// and names a time that exists, which time.Parse then reads as the same
// time. Anything else (an offset, a day the month lacks, a second of 60)
// is left to time.Parse and its errors. Every record's at is read, and
// time.Parse was a twentieth of decoding one.
func parseUTC(s string) (time.Time, bool) {
	if len(s) < 20 || s[len(s)-1] != 'Z' || !strictRFC3339(s) {
		return time.Time{}, false
	}
	num := func(from, to int) int {
		n := 0
		for _, c := range []byte(s[from:to]) {
			n = n*10 + int(c-'0')
		}
		return n
	}
	year, month, day := num(0, 4), num(5, 7), num(8, 10)
	hour, minute, sec := num(11, 13), num(14, 16), num(17, 19)
	if month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	nsec := 0
	if frac := s[19 : len(s)-1]; frac != "" { // "." and 1 to 9 digits
		nsec = num(20, len(s)-1)
		for range 10 - len(frac) {
			nsec *= 10
		}
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), true
}

// daysIn is the number of days of the month (1-12) in the proleptic
// Gregorian year, as time.Parse counts them.
func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// uuidPattern is the "uuid" format: the variant is the first hex digit of
// the fourth group.
const uuidPattern = `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$`

// timePattern is the grammar strictRFC3339 accepts.
const timePattern = `^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$`

// Decode decodes and validates one event. Errors are [*FieldError]s with
// Index 0. It reads a record of the log as it was written: the rules that
// ingest added later (lone surrogate escapes, "." and ".." segments in
// ids) are for new facts only, held by [DecodeBatch] and [CanonicalBatch].
func Decode(record []byte) (Event, error) {
	ev, fe := decodeRecord(record, nil)
	if fe != nil {
		return Event{}, fe
	}
	return ev, nil
}

// A Decoder is [Decode] with memory kept from one call to the next: the
// values of a fact's binary fields (token ids, log-probs, a vocabulary's
// offsets) are carved from a buffer it keeps, rather than allocated and
// zeroed for every fact. It decides and reports exactly what Decode does.
//
// Those values stay valid only until the Decoder's next Decode: it suits a
// reader that takes what it needs of a fact (its token counts, say) before
// the next one, and copies whatever it keeps. A Decoder is not safe for
// concurrent use. The zero value is ready.
type Decoder struct {
	words wordArena
	st    decodeState
}

// Decode is [Decode] into d's memory.
func (d *Decoder) Decode(record []byte) (Event, error) {
	d.words.reset(len(record))
	// A record of the log, read as written (not ingest's rules); the
	// binary text the state collects is not used, and its slice is kept.
	d.st = decodeState{arena: &d.words, binary: d.st.binary[:0]}
	ev, fe := decodeRecord(record, &d.st)
	if fe != nil {
		return Event{}, fe
	}
	return ev, nil
}

// DecodeBatch decodes and validates a request body holding one event object
// or an array of them. It stops at the first invalid event: the returned
// error is a [*FieldError] whose Index names it, and no events are returned.
func DecodeBatch(body []byte) ([]Event, error) {
	evs, _, err := decodeBatch(body, false, nil)
	return evs, err
}

// CanonicalBatch is DecodeBatch followed by EncodeBatch, in one pass: the
// events of body and their canonical records. It is what ingest stores.
// The text of a version 2 binary field goes into the record as it was
// received, without being encoded again: strict decoding refuses every
// encoding of the values but the one canonical form, so the text a
// producer sent is that form (docs/design.md §18.2).
func CanonicalBatch(body []byte) ([]Event, [][]byte, error) {
	var c Canonicalizer
	return c.Batch(body)
}

// A Canonicalizer is [CanonicalBatch] with memory kept from one call to the
// next: the values of the events' binary fields and the canonical records
// are carved from buffers it keeps, so that a server taking large bodies
// at a high rate does not allocate (and zero) them for every request.
//
// What Batch returns stays valid until the next Batch of the same
// Canonicalizer; drop the Canonicalizer instead of reusing it while
// anything may still read them. A Canonicalizer is not safe for concurrent
// use. The zero value is ready.
type Canonicalizer struct {
	words   wordArena
	records []byte // canonical records, end to end
}

// Batch is [CanonicalBatch] into c's memory.
func (c *Canonicalizer) Batch(body []byte) ([]Event, [][]byte, error) {
	c.words.reset(len(body))
	// A canonical record is about as long as the event as sent.
	if cap(c.records) < len(body) {
		c.records = make([]byte, 0, len(body)+len(body)/8)
	}
	c.records = c.records[:0]
	evs, states, err := decodeBatch(body, true, &c.words)
	if err != nil {
		return nil, nil, err
	}
	out := make([][]byte, len(evs))
	for i, ev := range evs {
		start := len(c.records)
		b, err := appendEncoded(c.records, ev, states[i].binary)
		if err != nil {
			return nil, nil, batchError(i, err)
		}
		// A record that did not fit moved the buffer (the records before
		// it stay where they were); each is capped, so that an append to
		// one cannot run into the next.
		c.records = b
		out[i] = b[start:len(b):len(b)]
	}
	return evs, out, nil
}

// decodeBatch is DecodeBatch; with keep, it also returns each event's
// decodeState.
func decodeBatch(body []byte, keep bool, arena *wordArena) ([]Event, []decodeState, error) {
	return decodeBatchWith(body, keep, arena, true)
}

// decodeBatchWith is decodeBatch; fast tries decodeBatchFast first.
func decodeBatchWith(body []byte, keep bool, arena *wordArena, fast bool) ([]Event, []decodeState, error) {
	var states []decodeState
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, nil, &FieldError{Err: ErrEmpty, Detail: "the body is empty"}
	}
	// The fast path reads a body of canonical events in one pass, and
	// bounds each event's nesting inside the array as it validates it: a
	// body it takes is one checkDepth passes.
	if fast && body[0] == '[' {
		if evs, states, ok := decodeBatchFast(body, keep, arena); ok {
			return evs, states, nil
		}
	}
	// Before any parser sees the body: nesting is what parsers recurse on.
	if fe := checkDepth(body); fe != nil {
		return nil, nil, fe
	}
	st := decodeState{ingest: true, arena: arena}
	// Invalid UTF-8 is left to decodeOne, which runs per event and so names
	// the event that holds it.
	if body[0] != '[' {
		ev, fe := decodeOne(body, &st)
		if fe != nil {
			return nil, nil, fe
		}
		return []Event{ev}, []decodeState{st}, nil
	}
	// One validation of the whole body; the events then need no second.
	if !json.Valid(body) {
		var items []json.RawMessage
		return nil, nil, &FieldError{Err: ErrMalformed, Detail: syntaxDetail(json.Unmarshal(body, &items))}
	}
	items, _ := scanArray(body)
	if len(items) == 0 {
		return nil, nil, &FieldError{Err: ErrEmpty, Detail: "the array holds no events"}
	}
	out := make([]Event, len(items))
	if keep {
		states = make([]decodeState, len(items))
	}
	for i, item := range items {
		st = decodeState{ingest: true, arena: arena}
		ev, fe := decodeValidJSON(item, &st)
		if fe != nil {
			fe.Index = i
			return nil, nil, fe
		}
		out[i] = ev
		if keep {
			states[i] = st
		}
	}
	return out, states, nil
}

// decodeBatchFast is decodeBatch of an array body, when every event in it
// takes the fast path and is accepted: the events are validated once, as
// decodeFast reads them, rather than by a validation of the whole body and
// then again as each is cut and read, and their nesting is bounded there
// rather than by checkDepth's pass over the body. It reports false for
// anything else (an event the fast path leaves, any refusal, text between
// the events that is not a comma or white space), and decodeBatch then
// reads the body from the start as before, for the verdict and the error
// it gives: so a refusal found here never stands for a body that another
// event, or the array, makes malformed.
//
// The events are cut by skipValue, which trusts its input to be JSON. On
// a body that is not, it may cut them wrongly; but each piece is then
// validated whole by decodeFast, and the text between the pieces here,
// so that a body all of whose pieces pass is a JSON array, and cut where
// scanArray cuts it.
func decodeBatchFast(body []byte, keep bool, arena *wordArena) ([]Event, []decodeState, bool) {
	i := skipSpace(body, 1)
	if i < len(body) && body[i] == ']' {
		return nil, nil, false // the empty array's refusal is decodeBatch's
	}
	var out []Event
	var states []decodeState
	for {
		if i >= len(body) {
			return nil, nil, false
		}
		end := skipValue(body, i)
		if end <= i {
			return nil, nil, false
		}
		// The array encloses the event: its data may nest one level less
		// deep than a record's alone, as checkDepth would count it.
		st := decodeState{ingest: true, arena: arena, enclosing: 1}
		ev, fe, ok := decodeFast(body[i:end], &st)
		if !ok || fe != nil {
			return nil, nil, false
		}
		if out == nil {
			// As many events as the first one's size fits in the body: a
			// guess that spares growing the slices in most bodies.
			n := min(len(body)/(end-i+1)+1, 1<<12)
			out = make([]Event, 0, n)
			if keep {
				states = make([]decodeState, 0, n)
			}
		}
		out = append(out, ev)
		if keep {
			states = append(states, st)
		}
		if i = skipSpace(body, end); i < len(body) && body[i] == ',' {
			i = skipSpace(body, i+1)
			continue
		}
		if i == len(body)-1 && body[i] == ']' {
			return out, states, true
		}
		return nil, nil, false
	}
}

// decodeRecord is checkDepth, then decodeOne: one record read whole, with
// the fast path tried first. A record the fast path takes is one
// checkDepth passes (canonicalEnvelope bounds the data's nesting), so only
// a record that leaves it pays checkDepth's two scans of every byte, which
// were a sixth of a token-bearing turn's decoding.
func decodeRecord(record []byte, st *decodeState) (Event, *FieldError) {
	if ev, fe, ok := decodeFast(record, st); ok {
		return ev, fe
	}
	if fe := checkDepth(record); fe != nil {
		return Event{}, fe
	}
	return decodeSlow(record, st)
}

// decodeOne decodes one record of a body whose nesting checkDepth passed.
func decodeOne(record []byte, st *decodeState) (Event, *FieldError) {
	if ev, fe, ok := decodeFast(record, st); ok {
		return ev, fe
	}
	return decodeSlow(record, st)
}

// decodeFast is the fast path of decoding one record: ok when the record
// is one of the bounded size, valid UTF-8, whose envelope has the
// canonical layout and whose data is valid JSON, which makes the record
// valid JSON (canonenv.go). The event or refusal it returns then is the
// one the general path gives.
func decodeFast(record []byte, st *decodeState) (Event, *FieldError, bool) {
	if len(record) > 2*MaxRecordBytes || !utf8.Valid(record) {
		return Event{}, nil, false
	}
	env, at, ok, unchecked := canonicalEnvelope(record, st, true)
	if !ok {
		return Event{}, nil, false
	}
	ev, fe := decodeData(env, at, st, unchecked)
	if fe != nil && unchecked && !validJSON(env.Data, st.dataDepth()) {
		// Data that is not JSON, or nests too deep: the general path
		// refuses the record as malformed. Any other refusal stands only
		// for data that is JSON, as it would on the general path. (A
		// fact decoded whole was validated whole: its object's members
		// were cut by validMembers.)
		return Event{}, nil, false
	}
	return ev, fe, true
}

// decodeSlow is decoding one record once the fast path has passed it by.
func decodeSlow(record []byte, st *decodeState) (Event, *FieldError) {
	// The exact bound applies to the canonical form (EncodeBatch); a raw
	// record twice that size cannot shrink under it, so refuse it unread.
	if len(record) > 2*MaxRecordBytes {
		return Event{}, &FieldError{Err: ErrTooLarge, Detail: fmt.Sprintf("%d bytes, more than %d", len(record), MaxRecordBytes)}
	}
	if !json.Valid(record) {
		var probe any
		return Event{}, &FieldError{Err: ErrMalformed, Detail: syntaxDetail(json.Unmarshal(record, &probe))}
	}
	return decodeValidJSON(record, st)
}

// decodeValidJSON is decodeOne for a record known to be valid JSON: an
// element of a batch whose whole body was validated. st collects the
// text of the data's binary fields and says whether ingest's rules apply
// (see decodeState); nil reads a record of the log.
func decodeValidJSON(record []byte, st *decodeState) (Event, *FieldError) {
	if len(record) > 2*MaxRecordBytes {
		return Event{}, &FieldError{Err: ErrTooLarge, Detail: fmt.Sprintf("%d bytes, more than %d", len(record), MaxRecordBytes)}
	}
	if !utf8.Valid(record) {
		return Event{}, &FieldError{Err: ErrMalformed, Detail: fmt.Sprintf("invalid UTF-8 at byte %d", invalidUTF8At(record))}
	}
	env, at, ok, _ := canonicalEnvelope(record, st, false)
	if !ok {
		var fe *FieldError
		if env, fe = decodeEnvelope(record, st); fe != nil {
			return Event{}, fe
		}
		// The rules accepted it: it parses.
		at, _ = time.Parse(time.RFC3339Nano, env.At)
	}
	return decodeData(env, at, st, false)
}

// envelopeSpec is the envelope's spec, looked up once.
var envelopeSpec = sync.OnceValue(func() *spec { return specOf(reflect.TypeFor[envelope]()) })

// decodeEnvelope decodes and checks the envelope of the valid JSON
// record by the general path: any layout, any escapes.
func decodeEnvelope(record []byte, st *decodeState) (env envelope, fe *FieldError) {
	rv := reflect.ValueOf(&env).Elem()
	es := envelopeSpec()
	if fe := decodeObject(record, rv, es, "", st.nested()); fe != nil {
		return env, fe
	}
	if fe := checkRules(rv, es, ""); fe != nil {
		return env, fe
	}
	// The rules accepted the id: a UUID's 36 characters, whose canonical
	// form is lower case. (A canonical envelope's id is lower case
	// already: canonicalEnvelope takes no other.)
	env.ID = strings.ToLower(env.ID)
	return env, nil
}

// decodeData is the rest of decodeValidJSON once the envelope has
// decoded and passed its rules, at being its time: the type and version,
// and the data. unchecked is canonicalEnvelope's: the data, an object, is
// validated as its members are cut.
func decodeData(env envelope, at time.Time, st *decodeState, unchecked bool) (Event, *FieldError) {
	ev := Event{ID: env.ID, Run: env.Run, Type: env.Type, V: env.V, Source: env.Source}
	ev.At = at.UTC()
	versions, ok := catalogue[env.Type]
	if !ok {
		return Event{}, fieldErr("type", ErrUnknownType, "%q is not in the catalogue", clip(string(env.Type)))
	}
	if env.V < 1 || env.V > len(versions) {
		return Event{}, fieldErr("v", ErrUnknownVersion, "%s has no schema version %d", env.Type, env.V)
	}
	version := &versions[env.V-1]
	wire := version.newWire()
	dv := reflect.ValueOf(wire).Elem()
	ds := version.spec()
	if !decodeDataFast(env.Data, dv, ds, st) {
		if fe := decodeObjectOf(env.Data, dv, ds, "data", st, unchecked); fe != nil {
			return Event{}, fe
		}
	}
	if fe := checkRules(dv, ds, "data"); fe != nil {
		return Event{}, fe
	}
	dropEmptyOptional(dv, ds)
	ev.Data = upcast(versions, env.V, wire)
	return ev, nil
}

// decodeDataFast decodes data, a fact's, into the struct dv of spec ds in
// one pass (fastobject.go), or reports false and leaves dv and st as they
// were, for decodeObjectOf.
func decodeDataFast(data []byte, dv reflect.Value, ds *spec, st *decodeState) bool {
	if ds.object == nil || st != nil && st.general {
		return false
	}
	var binary int
	if st != nil {
		binary = len(st.binary)
	}
	end, ok := ds.object.decode(data, skipSpace(data, 0), dv.Addr().UnsafePointer(), st.dataDepth(), "data", st)
	if ok && skipSpace(data, end) == len(data) {
		return true
	}
	dv.SetZero()
	if st != nil {
		st.binary = st.binary[:binary]
	}
	return false
}

// Encode writes ev in canonical form (see the package documentation), in
// the shape of its version ev.V: an event of an older version than its
// type's newest is written as that version's wire form, or refused when
// the version cannot hold its data (a turn of two version segments as
// version 1, say). It refuses an event whose canonical form exceeds
// [MaxRecordBytes].
func Encode(ev Event) ([]byte, error) {
	return encode(ev, nil)
}

// encode is Encode; binary holds the received text of binary fields of
// the event's wire form, when it was just decoded (see CanonicalBatch).
func encode(ev Event, binary []binaryText) ([]byte, error) {
	return appendEncoded(make([]byte, 0, 512), ev, binary)
}

// appendEncoded appends the record encode writes to out.
func appendEncoded(out []byte, ev Event, binary []binaryText) ([]byte, error) {
	wire, err := downcast(ev.Type, ev.V, ev.Data)
	if err != nil {
		return nil, err
	}
	start := len(out)
	out = append(out, `{"id":`...)
	out = appendJSONString(out, ev.ID)
	out = append(out, `,"run":`...)
	out = appendJSONString(out, ev.Run)
	out = append(out, `,"type":`...)
	out = appendJSONString(out, string(ev.Type))
	out = append(out, `,"v":`...)
	out = strconv.AppendInt(out, int64(ev.V), 10)
	out = append(out, `,"at":`...)
	out = appendJSONString(out, ev.At.UTC().Format(time.RFC3339Nano))
	out = append(out, `,"source":`...)
	out = appendJSONString(out, ev.Source)
	out = append(out, `,"data":`...)
	out, err = appendData(out, reflect.ValueOf(wire).Elem(), binary)
	if err != nil {
		return nil, fmt.Errorf("events: encode %s data: %w", ev.Type, err)
	}
	out = append(out, '}')
	if n := len(out) - start; n > MaxRecordBytes {
		return nil, &FieldError{Err: ErrTooLarge, Detail: fmt.Sprintf("%d bytes encoded, more than %d", n, MaxRecordBytes)}
	}
	return out, nil
}

// strictRFC3339 accepts exactly YYYY-MM-DDTHH:MM:SS, an optional fraction
// of 1 to 9 digits after a '.', and Z or an offset ±HH:MM with HH <= 23 and
// MM <= 59. Go's parser also takes one-digit hours, a ',' before the
// fraction and offsets such as +24:00, which other languages' clients
// refuse; the ledger holds every producer to one grammar.
func strictRFC3339(s string) bool {
	digits := func(from, to int) bool {
		for i := from; i < to; i++ {
			if s[i] < '0' || s[i] > '9' {
				return false
			}
		}
		return true
	}
	if len(s) < 20 || !digits(0, 4) || s[4] != '-' || !digits(5, 7) || s[7] != '-' || !digits(8, 10) ||
		s[10] != 'T' || !digits(11, 13) || s[13] != ':' || !digits(14, 16) || s[16] != ':' || !digits(17, 19) {
		return false
	}
	i := 19
	if s[i] == '.' {
		j := i + 1
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if n := j - i - 1; n < 1 || n > 9 {
			return false
		}
		i = j
	}
	switch rest := s[i:]; {
	case rest == "Z":
		return true
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		return digits(i+1, i+3) && digits(i+4, i+6) && rest[1:3] <= "23" && rest[4:6] <= "59"
	}
	return false
}

// EncodeBatch encodes each event canonically. An event that cannot be
// encoded, or whose record would exceed [MaxRecordBytes], fails the batch
// with a [*FieldError] whose Index names it.
func EncodeBatch(evs []Event) ([][]byte, error) {
	out := make([][]byte, len(evs))
	for i, ev := range evs {
		b, err := Encode(ev)
		if err != nil {
			return nil, batchError(i, err)
		}
		out[i] = b
	}
	return out, nil
}

// batchError is the error of encoding the i-th event of a batch: a
// [*FieldError] naming it.
func batchError(i int, err error) *FieldError {
	if fe, ok := AsFieldError(err); ok {
		fe.Index = i
		return fe
	}
	return &FieldError{Index: i, Err: ErrInvalidValue, Detail: err.Error()}
}

func syntaxDetail(err error) string {
	if se, ok := err.(*json.SyntaxError); ok {
		return fmt.Sprintf("%v at byte %d", se, se.Offset)
	}
	if err == nil {
		return "not JSON"
	}
	return err.Error()
}

// checkDepth refuses b when its arrays and objects nest deeper than
// [MaxDepth]. It counts brackets outside strings, which for valid JSON is
// the nesting depth; for invalid JSON the verdict is malformed either way.
func checkDepth(b []byte) *FieldError {
	if bytes.Count(b, []byte("["))+bytes.Count(b, []byte("{")) <= MaxDepth {
		return nil
	}
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			if depth++; depth > MaxDepth {
				return &FieldError{Err: ErrMalformed, Detail: fmt.Sprintf("arrays and objects nest deeper than %d levels at byte %d", MaxDepth, i)}
			}
		case ']', '}':
			depth--
		}
	}
	return nil
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}
