package events

import (
	"strconv"

	"github.com/google/uuid"
)

// decisionNamespace is the UUIDv5 namespace of decision ids. It never
// changes: a decision re-emitted by any version of the projector must carry
// the id it had the first time.
var decisionNamespace = uuid.MustParse("6f1c2a9e-4b7d-5e10-9a3c-2d8e1f0b7c45")

// NewID returns a fresh UUIDv7: time-ordered, unique, for producers.
func NewID() string {
	return uuid.Must(uuid.NewV7()).String()
}

// DecisionID is the deterministic UUIDv5 of the seq-th decision of a kind in
// a run. The three parts are joined with NUL, which none of them can
// contain, so distinct triples never collide by concatenation.
func DecisionID(run string, kind Type, seq uint64) string {
	name := run + "\x00" + string(kind) + "\x00" + strconv.FormatUint(seq, 10)
	return uuid.NewSHA1(decisionNamespace, []byte(name)).String()
}

// MisroutedID is the deterministic UUIDv5 of the misrouted finding about the
// record at partition and offset of a run's facts topic: a finding that no
// fold numbers, named by the position of the record it is about (four
// NUL-separated parts, so it never equals a DecisionID).
func MisroutedID(run string, partition int32, offset int64) string {
	name := run + "\x00audit.finding\x00misrouted\x00" + strconv.FormatInt(int64(partition), 10) + ":" + strconv.FormatInt(offset, 10)
	return uuid.NewSHA1(decisionNamespace, []byte(name)).String()
}
