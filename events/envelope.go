package events

import (
	"bytes"
	"fmt"
	json "github.com/segmentio/encoding/json"
	"reflect"
	"time"
	"unicode/utf8"

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
	// Type and V name the catalogue entry Data belongs to.
	Type Type
	V    int
	// At is the producer's clock: informational, never read by projections.
	At time.Time
	// Source is the producer's identity (engine, worker, trainer, scheduler).
	Source string
	// Data is the fact itself; its dynamic type matches Type and V.
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

// Decode decodes and validates one event. Errors are [*FieldError]s with
// Index 0.
func Decode(record []byte) (Event, error) {
	if fe := checkDepth(record); fe != nil {
		return Event{}, fe
	}
	ev, fe := decodeOne(record)
	if fe != nil {
		return Event{}, fe
	}
	return ev, nil
}

// DecodeBatch decodes and validates a request body holding one event object
// or an array of them. It stops at the first invalid event: the returned
// error is a [*FieldError] whose Index names it, and no events are returned.
func DecodeBatch(body []byte) ([]Event, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, &FieldError{Err: ErrEmpty, Detail: "the body is empty"}
	}
	// Before any parser sees the body: nesting is what parsers recurse on.
	if fe := checkDepth(body); fe != nil {
		return nil, fe
	}
	// Invalid UTF-8 is left to decodeOne, which runs per event and so names
	// the event that holds it.
	if body[0] != '[' {
		ev, fe := decodeOne(body)
		if fe != nil {
			return nil, fe
		}
		return []Event{ev}, nil
	}
	// One validation of the whole body; the events then need no second.
	if !json.Valid(body) {
		var items []json.RawMessage
		return nil, &FieldError{Err: ErrMalformed, Detail: syntaxDetail(json.Unmarshal(body, &items))}
	}
	items, _ := scanArray(body)
	if len(items) == 0 {
		return nil, &FieldError{Err: ErrEmpty, Detail: "the array holds no events"}
	}
	out := make([]Event, len(items))
	for i, item := range items {
		ev, fe := decodeValidJSON(item)
		if fe != nil {
			fe.Index = i
			return nil, fe
		}
		out[i] = ev
	}
	return out, nil
}

func decodeOne(record []byte) (Event, *FieldError) {
	// The exact bound applies to the canonical form (EncodeBatch); a raw
	// record twice that size cannot shrink under it, so refuse it unread.
	if len(record) > 2*MaxRecordBytes {
		return Event{}, &FieldError{Err: ErrTooLarge, Detail: fmt.Sprintf("%d bytes, more than %d", len(record), MaxRecordBytes)}
	}
	if !json.Valid(record) {
		var probe any
		return Event{}, &FieldError{Err: ErrMalformed, Detail: syntaxDetail(json.Unmarshal(record, &probe))}
	}
	return decodeValidJSON(record)
}

// decodeValidJSON is decodeOne for a record known to be valid JSON: an
// element of a batch whose whole body was validated.
func decodeValidJSON(record []byte) (Event, *FieldError) {
	if len(record) > 2*MaxRecordBytes {
		return Event{}, &FieldError{Err: ErrTooLarge, Detail: fmt.Sprintf("%d bytes, more than %d", len(record), MaxRecordBytes)}
	}
	if !utf8.Valid(record) {
		return Event{}, &FieldError{Err: ErrMalformed, Detail: fmt.Sprintf("invalid UTF-8 at byte %d", invalidUTF8At(record))}
	}
	var env envelope
	if fe := decodeStrict(record, &env, ""); fe != nil {
		return Event{}, fe
	}
	ev := Event{Run: env.Run, Type: env.Type, V: env.V, Source: env.Source}
	id, err := uuid.Parse(env.ID)
	if err != nil || len(env.ID) != 36 || id.Variant() != uuid.RFC4122 {
		return Event{}, fieldErr("id", ErrInvalidValue, "%q is not a UUID (8-4-4-4-12 hex)", clip(env.ID))
	}
	ev.ID = id.String()
	if !ValidRunID(env.Run) {
		return Event{}, fieldErr("run", ErrInvalidValue, "%q is not a run id ([A-Za-z0-9._-]{1,128}, not . or ..)", clip(env.Run))
	}
	at, err := time.Parse(time.RFC3339Nano, env.At)
	if err != nil || !strictRFC3339(env.At) {
		return Event{}, fieldErr("at", ErrInvalidValue, "%q is not an RFC 3339 time", clip(env.At))
	}
	// The canonical form writes `at` in UTC; an offset that moves it out of
	// years 0000-9999 would encode to a time RFC 3339 cannot express.
	if y := at.UTC().Year(); y < 0 || y > 9999 {
		return Event{}, fieldErr("at", ErrInvalidValue, "%q is outside years 0000-9999 in UTC", clip(env.At))
	}
	ev.At = at.UTC()
	versions, ok := catalogue[env.Type]
	if !ok {
		return Event{}, fieldErr("type", ErrUnknownType, "%q is not in the catalogue", clip(string(env.Type)))
	}
	mk, ok := versions[env.V]
	if !ok {
		return Event{}, fieldErr("v", ErrUnknownVersion, "%s has no schema version %d", env.Type, env.V)
	}
	data := mk()
	if fe := decodeStrict(env.Data, data, "data"); fe != nil {
		return Event{}, fe
	}
	if v, ok := data.(validator); ok {
		if fe := v.validate(); fe != nil {
			return Event{}, fe
		}
	}
	dropEmptyOptional(reflect.ValueOf(data).Elem())
	ev.Data = data
	return ev, nil
}

// Encode writes ev in canonical form (see the package documentation). It
// refuses an event whose canonical form exceeds [MaxRecordBytes].
func Encode(ev Event) ([]byte, error) {
	data, err := marshal(ev.Data)
	if err != nil {
		return nil, fmt.Errorf("events: encode %s data: %w", ev.Type, err)
	}
	out, err := marshal(envelope{
		ID: ev.ID, Run: ev.Run, Type: ev.Type, V: ev.V,
		At: ev.At.UTC().Format(time.RFC3339Nano), Source: ev.Source, Data: data,
	})
	if err != nil {
		return nil, fmt.Errorf("events: encode envelope: %w", err)
	}
	if len(out) > MaxRecordBytes {
		return nil, &FieldError{Err: ErrTooLarge, Detail: fmt.Sprintf("%d bytes encoded, more than %d", len(out), MaxRecordBytes)}
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
			if fe, ok := AsFieldError(err); ok {
				fe.Index = i
				return nil, fe
			}
			return nil, &FieldError{Index: i, Err: ErrInvalidValue, Detail: err.Error()}
		}
		out[i] = b
	}
	return out, nil
}

// marshal is json.Marshal without HTML escaping and without the trailing
// newline, so text lands verbatim.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
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
