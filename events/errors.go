package events

import (
	"errors"
	"fmt"
)

// Sentinel errors wrapped by every [*FieldError]. Match them with errors.Is.
var (
	ErrMalformed      = errors.New("events: malformed JSON")
	ErrTooLarge       = errors.New("events: record too large")
	ErrUnknownType    = errors.New("events: unknown type")
	ErrUnknownVersion = errors.New("events: unknown version")
	ErrUnknownField   = errors.New("events: unknown field")
	ErrDuplicateField = errors.New("events: duplicate field")
	ErrMissingField   = errors.New("events: missing field")
	ErrWrongType      = errors.New("events: wrong JSON type")
	ErrInvalidValue   = errors.New("events: invalid value")
	ErrEmpty          = errors.New("events: no events")
)

// codes maps each sentinel to its stable wire code (the HTTP error's "code",
// shared with the SDKs' test vectors).
var codes = map[error]string{
	ErrMalformed:      "malformed",
	ErrTooLarge:       "too_large",
	ErrUnknownType:    "unknown_type",
	ErrUnknownVersion: "unknown_version",
	ErrUnknownField:   "unknown_field",
	ErrDuplicateField: "duplicate_field",
	ErrMissingField:   "missing_field",
	ErrWrongType:      "wrong_type",
	ErrInvalidValue:   "invalid_value",
	ErrEmpty:          "empty",
}

// FieldError says which event of a request was refused, which field, and why.
type FieldError struct {
	// Index is the event's position in its request (0 for a single event).
	Index int
	// Field is the dotted path of the offending field ("data.token_ids",
	// "data.gates[2].name"); empty when the whole record is at fault.
	Field string
	// Err is one of the package's sentinel errors.
	Err error
	// Detail explains the problem in words.
	Detail string
}

func (e *FieldError) Error() string {
	where := fmt.Sprintf("event %d", e.Index)
	if e.Field != "" {
		where += " field " + e.Field
	}
	if e.Detail == "" {
		return where + ": " + e.Err.Error()
	}
	return where + ": " + e.Err.Error() + ": " + e.Detail
}

func (e *FieldError) Unwrap() error { return e.Err }

// Code is the stable, machine-readable name of the error's kind.
func (e *FieldError) Code() string {
	if c, ok := codes[e.Err]; ok {
		return c
	}
	return "invalid"
}

// AsFieldError returns err's *FieldError, if it wraps one.
func AsFieldError(err error) (*FieldError, bool) {
	var fe *FieldError
	ok := errors.As(err, &fe)
	return fe, ok
}

func fieldErr(field string, sentinel error, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Err: sentinel, Detail: fmt.Sprintf(format, args...)}
}
