package events

import (
	"fmt"
	"time"
	"unicode/utf8"

	json "github.com/segmentio/encoding/json"
)

// ValidJSON is the fast path's validator, for input that is valid UTF-8
// and nests at most MaxDepth deep.
var ValidJSON = func(b []byte) bool { return validJSON(b, 0) }

// DecodeGeneral is Decode by the general path alone, the canonical
// envelope's fast path left out (canonenv.go); with ingest, by the rules
// ingest holds new facts to. The fast path must agree with it on every
// input.
func DecodeGeneral(record []byte, ingest bool) (Event, error) {
	st := decodeState{ingest: ingest, general: true}
	ev, fe := decodeGeneral(record, &st)
	if fe != nil {
		return Event{}, fe
	}
	return ev, nil
}

// DecodeBatchGeneral is DecodeBatch without its fast path for arrays:
// the body validated whole, then each event read.
func DecodeBatchGeneral(body []byte) ([]Event, error) {
	evs, _, err := decodeBatchWith(body, false, nil, false)
	return evs, err
}

// DecodeAs is Decode, or with ingest the decode of one event of a request
// body, each by the path the ledger takes.
func DecodeAs(record []byte, ingest bool) (Event, error) {
	st := decodeState{ingest: ingest}
	ev, fe := decodeRecord(record, &st)
	if fe != nil {
		return Event{}, fe
	}
	return ev, nil
}

// decodeGeneral is decodeOne without the fast path: the record
// validated whole, then its envelope decoded by reflection.
func decodeGeneral(record []byte, st *decodeState) (Event, *FieldError) {
	if fe := checkDepth(record); fe != nil {
		return Event{}, fe
	}
	if len(record) > 2*MaxRecordBytes {
		return Event{}, &FieldError{Err: ErrTooLarge, Detail: fmt.Sprintf("%d bytes, more than %d", len(record), MaxRecordBytes)}
	}
	if !json.Valid(record) {
		var probe any
		return Event{}, &FieldError{Err: ErrMalformed, Detail: syntaxDetail(json.Unmarshal(record, &probe))}
	}
	if !utf8.Valid(record) {
		return Event{}, &FieldError{Err: ErrMalformed, Detail: fmt.Sprintf("invalid UTF-8 at byte %d", invalidUTF8At(record))}
	}
	env, fe := decodeEnvelope(record, st)
	if fe != nil {
		return Event{}, fe
	}
	at, _ := time.Parse(time.RFC3339Nano, env.At)
	return decodeData(env, at, st, false)
}
