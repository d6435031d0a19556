// Package events is the fact catalogue of rolloutledger: the envelope every
// Kafka record carries, one Go type per fact type, strict validation, the
// canonical encoding, and deterministic identifiers.
//
// # Envelope
//
// Every record on the facts topic is one JSON [Event]: an id (a UUID chosen by
// the producer, the idempotency key), the run it belongs to (also the Kafka
// key), the fact type and its schema version, the producer's clock (`at`,
// informational only: projections never read it), the producer's identity and
// the type-specific data.
//
// # Strictness
//
// [DecodeBatch] and [Decode] refuse anything the catalogue does not
// describe: unknown types and versions, unknown, missing or repeated fields
// (a key given twice in one object, which JSON parsers resolve differently),
// JSON values of the wrong type, null, ids that do not match their pattern,
// token arrays whose lengths disagree with completion_tokens, invalid UTF-8,
// NUL characters, records over [MaxRecordBytes], and bodies whose arrays and
// objects nest deeper than [MaxDepth] (refused before any parser recurses
// into them). Every refusal is a [*FieldError] naming the event's index in
// its request and the dotted path of the offending field, and wraps one of
// the sentinel errors (ErrUnknownType, ...) so callers can branch with
// errors.Is; [FieldError.Code] gives the stable code used on the wire.
//
// # Canonical encoding
//
// [Encode] writes an event in canonical form: envelope fields in catalogue
// order, data fields in struct order, optional fields omitted when empty, no
// HTML escaping, `at` in UTC RFC 3339. Ingest stores the canonical bytes, so
// two deliveries of the same fact are byte-identical however the producer
// spaced its JSON, and the Merkle leaf of a fact depends only on its content.
//
// # Identifiers
//
// [NewID] makes a UUIDv7 for producers. [DecisionID] makes the UUIDv5 of a
// decision from its run, kind and sequence, so a projector that re-emits a
// decision after a crash emits the same id.
package events
