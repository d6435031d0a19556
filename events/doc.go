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
// token arrays whose lengths disagree with completion_tokens, binary fields
// that are not strict base64 or hold values out of bounds, version segments
// out of order or outside the completion, invalid UTF-8,
// NUL characters, records over [MaxRecordBytes], and bodies whose arrays and
// objects nest deeper than [MaxDepth] (refused before any parser recurses
// into them). Every refusal is a [*FieldError] naming the event's index in
// its request and the dotted path of the offending field, and wraps one of
// the sentinel errors (ErrUnknownType, ...) so callers can branch with
// errors.Is; [FieldError.Code] gives the stable code used on the wire.
//
// # Schema
//
// The rules of one value are struct tags (`rl:"..."`, see facts.go); the
// rules that span fields are data listed by each type's ruleSet method
// (rules.go), not code. [JSONSchema] derives a JSON Schema of the whole
// catalogue from both, so that other languages check what the decoder
// checks: `go generate ./events/...` writes it to
// events/schema/catalogue.schema.json and into the Python SDK, whose
// validator is driven by it, and the tests fail while a copy is stale.
// events/schema/README.md explains the keywords JSON Schema lacks.
//
// # Versions
//
// A fact type has one or more schema versions (docs/design.md §18); each
// type's struct in facts.go is its newest, and every version decodes into
// it through one step per version (versions.go): version 1 of
// turn.generated has one policy_version, which becomes the one segment of
// [TurnGenerated.VersionSegments]. [Event.V] keeps the record's version and
// [Encode] writes that version's shape, so a version 1 record re-encodes to
// its own bytes. Version 2 carries token ids and log-probs as binary:
// standard base64 of little-endian int32 and float32 values, decoded
// strictly straight into the slices (binary.go).
//
// # Canonical encoding
//
// [Encode] writes an event in canonical form: envelope fields in catalogue
// order, data fields in struct order, optional fields omitted when empty, no
// HTML escaping, `at` in UTC RFC 3339, binary fields as base64. Ingest
// stores the canonical bytes, so two deliveries of the same fact are
// byte-identical however the producer spaced its JSON, and the Merkle leaf
// of a fact depends only on its content. [CanonicalBatch] decodes a body
// and writes its canonical records in one pass, copying each binary
// field's base64 as received: strict decoding admits one encoding of the
// values, so that text is already canonical. [CanonicalJSON] is the
// encoding of any value; the projections write their decisions with it
// too.
//
// # Identifiers
//
// [NewID] makes a UUIDv7 for producers. [DecisionID] makes the UUIDv5 of a
// decision from its run, kind and sequence, so a projector that re-emits a
// decision after a crash emits the same id.
package events
