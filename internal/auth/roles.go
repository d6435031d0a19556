package auth

import (
	"fmt"
	"path"
	"slices"

	"github.com/rolloutledger/rolloutledger/events"
)

// Role is what a token may do.
type Role string

// The roles.
const (
	Producer Role = "producer"
	Trainer  Role = "trainer"
	Reader   Role = "reader"
	Admin    Role = "admin"
)

// Roles lists every role.
var Roles = []Role{Producer, Trainer, Reader, Admin}

// Valid reports whether r is one of [Roles].
func (r Role) Valid() bool { return slices.Contains(Roles, r) }

// FactRoles says which role appends each fact type of the catalogue (admins
// append every type). Types missing here are appended by admins only.
var FactRoles = map[events.Type]Role{
	events.TypeRunStarted:       Producer,
	events.TypeTaskRegistered:   Producer,
	events.TypeGroupStarted:     Producer,
	events.TypeAttemptStarted:   Producer,
	events.TypeTurnGenerated:    Producer,
	events.TypeToolCalled:       Producer,
	events.TypeContextCompacted: Producer,
	events.TypeAttemptFinished:  Producer,
	events.TypeAttemptFailed:    Producer,
	events.TypeRewardComputed:   Producer,
	events.TypeGroupClosed:      Producer,
	events.TypePolicyPublished:  Trainer,
	events.TypeGradientApplied:  Trainer,
	// An engine's vocabulary, registered by a recording proxy or the SDK
	// beside the turns they write.
	events.TypeVocabularyRegistered: Producer,
}

// Access is a class of route.
type Access int

// The classes of route, from the router's table ([Classify]).
const (
	// Open routes need no token: health and metrics.
	Open Access = iota
	// Append is POST /v1/events: producers, trainers and admins, each event
	// then checked by type and run.
	Append
	// ReadBatches are the trainer's reads: the long poll, a batch, its
	// samples.
	ReadBatches
	// ReadAdmission is what the rollout side reads: a task's admission
	// decision, and whether the ledger knows an attempt (a recording proxy
	// in strict mode asks before an attempt's first turn).
	ReadAdmission
	// Read is every other GET.
	Read
	// Other is everything else: admins only.
	Other
)

// String names the access for error messages.
func (a Access) String() string {
	switch a {
	case Open:
		return "open"
	case Append:
		return "append events"
	case ReadBatches:
		return "read batches"
	case ReadAdmission:
		return "read task admission and attempts"
	case Read:
		return "read"
	}
	return "this route"
}

// Allows reports whether role r may use a route of class a (before any per
// run or per event check).
func (r Role) Allows(a Access) bool {
	switch a {
	case Open:
		return true
	case Append:
		return r == Producer || r == Trainer || r == Admin
	case ReadBatches:
		return r == Trainer || r == Reader || r == Admin
	case ReadAdmission:
		return r == Producer || r == Reader || r == Admin
	case Read:
		return r == Reader || r == Admin
	}
	return r == Admin
}

// MayAppend reports whether role r may append facts of type t.
func (r Role) MayAppend(t events.Type) bool {
	if r == Admin {
		return true
	}
	owner, ok := FactRoles[t]
	return ok && owner == r
}

// Principal is the authenticated caller of a request.
type Principal struct {
	// Name is the token's name, safe to log.
	Name string
	Role Role
	// Runs limits the token to runs matching one of these patterns
	// (path.Match syntax: "flash-*"); empty means every run.
	Runs []string
}

// InScope reports whether the principal may touch run.
func (p *Principal) InScope(run string) bool {
	if len(p.Runs) == 0 {
		return true
	}
	for _, pat := range p.Runs {
		if ok, _ := path.Match(pat, run); ok {
			return true
		}
	}
	return false
}

// DeniedError is a refusal of one event of an append: Field is "type" when
// the role may not write the event's type, "run" when the run is outside
// the token's scope.
type DeniedError struct {
	Index     int
	Field     string
	Principal string
	Detail    string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("auth: event %d field %s: %s", e.Index, e.Field, e.Detail)
}

// AuthorizeEvents checks every event of an append, in order, and returns a
// [*DeniedError] for the first one the principal may not write. A nil
// principal (authentication off) may write everything.
func (p *Principal) AuthorizeEvents(evs []events.Event) error {
	if p == nil {
		return nil
	}
	for i, ev := range evs {
		if !p.Role.MayAppend(ev.Type) {
			return &DeniedError{Index: i, Field: "type", Principal: p.Name,
				Detail: fmt.Sprintf("token %q (role %s) may not write %s facts", p.Name, p.Role, ev.Type)}
		}
		if !p.InScope(ev.Run) {
			return &DeniedError{Index: i, Field: "run", Principal: p.Name,
				Detail: fmt.Sprintf("token %q may not write run %q", p.Name, ev.Run)}
		}
	}
	return nil
}
