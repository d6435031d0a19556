package simulate

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"time"

	"github.com/rolloutledger/rolloutledger/events"
)

// Defaults of the zero [Options].
const (
	DefaultURL              = "http://127.0.0.1:7070"
	DefaultTasks            = 48
	DefaultSteps            = 4
	DefaultBatchGroups      = 8
	DefaultGroupSize        = 8
	DefaultWorkers          = 8
	DefaultMinTurns         = 5
	DefaultMaxTurns         = 200
	DefaultInfraFailureRate = 0.03
	DefaultContextBudget    = 32768
	DefaultEventsPerRequest = 256
)

// Bounds checked by [Options.Validate]. They keep a mistyped flag from
// asking for a run that cannot be generated in memory or encoded.
const (
	maxTasks            = 100_000
	maxGroupSize        = 1024
	maxTurnsLimit       = 10_000
	minContextBudget    = 4096
	maxEventsPerRequest = 10_000
)

// Options describe a synthetic run and how to push it. The zero value of
// every field means its default; event content is a pure function of Seed
// and the scale fields (Tasks, Steps, BatchGroups, GroupSize, MinTurns,
// MaxTurns, InfraFailureRate, Tokens, Text, FactVersion, ContextBudget), never of the transport
// fields (URL, Workers, EventsPerRequest, Token, Client, Logger).
type Options struct {
	// URL is the ledger's base URL [DefaultURL].
	URL string
	// Seed fixes all event content.
	Seed uint64
	// Run is the run id; empty means "sim-<seed>-<8 random hex>", so two
	// runs of one seed do not collide in one ledger.
	Run string
	// Tasks is the number of registered tasks [48].
	Tasks int
	// Steps is the number of trainer steps to feed: the simulator creates
	// train groups until Steps*BatchGroups of them are usable (neither
	// zero-signal nor infrastructure-lost), plus a small margin [4].
	Steps int
	// BatchGroups is the run config's batch_groups [8].
	BatchGroups int
	// MaxStaleness is the run config's max_staleness [6, the recipe's]; a
	// negative value means 0 (only turns of the current weights train).
	MaxStaleness int
	// GroupSize is the run config's group_size and the size of train
	// groups [8]; at least 2, since a group of one never carries signal.
	GroupSize int
	// Workers is the number of concurrent HTTP producers [8].
	Workers int
	// MinTurns and MaxTurns bound the turns of an attempt [5, 200]; the
	// distribution between them is long-tailed.
	MinTurns, MaxTurns int
	// InfraFailureRate is the chance that an attempt dies of an
	// infrastructure failure [0.03]. A negative rate means no failures.
	InfraFailureRate float64
	// Tokens inlines observation_token_ids, token_ids and logprobs on turns.
	Tokens bool
	// Text adds readable text (catalogue version 2): task prompts,
	// completion text, tool calls' input and output, each bounded to 2 KiB
	// with the rest counted in its *_cut field.
	Text bool
	// FactVersion is the catalogue version of the facts written: 0 means
	// 2 (the simulator writes no version 3 turns, which carry whole
	// prompts as a recording proxy sees them); 1 writes a version 1 run, whose turns each carry
	// one policy version (a turn in flight across a weight update reports
	// the version it started with) and no text.
	FactVersion int
	// ContextBudget is the context size in tokens beyond which an attempt
	// compacts its context [32768]; at least 4096.
	ContextBudget int
	// EventsPerRequest caps the events of one POST [256].
	EventsPerRequest int
	// Trainer runs a trainer stand-in beside the rollouts ([Train]): it
	// consumes the sealed batches over HTTP as the ledger seals them and
	// answers each with gradient.applied and policy.published, in place of
	// the plan's own policy versions. Turns keep the versions the plan
	// assigned them, so event content stays a function of the seed.
	Trainer bool
	// TrainerArrow has the trainer fetch its samples as Arrow IPC, as a
	// real trainer does; TrainerFetch, when set, sees each fetch
	// ([TrainerOptions]).
	TrainerArrow bool
	TrainerFetch func(Fetch)
	// Rate, when positive, caps the push at that many events per second
	// (on average over windows): a steady load for latency measurements.
	Rate float64
	// OnAck, when set, is called with every acknowledged request's events
	// and where Kafka stored them, from the pushing goroutines: for
	// latency measurements.
	OnAck func([]Ack)
	// Token, when set, is sent as "Authorization: Bearer <Token>".
	Token string
	// Client sends the requests; nil means a client with a 30 s timeout and
	// a connection pool sized to Workers.
	Client *http.Client
	// Logger receives progress and retries; nil discards.
	Logger *slog.Logger
}

// Ack is one acknowledged event: its position and when the answer came.
type Ack struct {
	ID        string
	Partition int32
	Offset    int64
	At        time.Time
}

// Validate reports every problem of o at once, joined with errors.Join. Zero
// values are valid: they stand for the defaults.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("simulate: "+format, args...))
	}
	if o.URL != "" {
		if u, err := url.Parse(o.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("url %q: want http://host[:port] or https://host[:port]", o.URL)
		}
	}
	if o.Run != "" && !events.ValidRunID(o.Run) {
		bad("run %q: want [A-Za-z0-9._-]{1,128}", o.Run)
	}
	between := func(name string, v, hi int) {
		if v < 0 || v > hi {
			bad("%s must be between 0 (default) and %d, got %d", name, hi, v)
		}
	}
	between("tasks", o.Tasks, maxTasks)
	between("steps", o.Steps, math.MaxInt32)
	between("batch_groups", o.BatchGroups, math.MaxInt32)
	if o.FactVersion < 0 || o.FactVersion > 2 {
		bad("fact_version must be 0 (newest), 1 or 2, got %d", o.FactVersion)
	}
	if o.FactVersion == 1 && o.Text {
		bad("text needs catalogue version 2 facts, not fact_version 1")
	}
	if o.Rate < 0 {
		bad("rate must not be negative, got %g", o.Rate)
	}
	if o.MaxStaleness > 1000 {
		bad("max_staleness must be at most 1000, got %d", o.MaxStaleness)
	}
	between("workers", o.Workers, 1024)
	between("events_per_request", o.EventsPerRequest, maxEventsPerRequest)
	if o.GroupSize < 0 || o.GroupSize == 1 || o.GroupSize > maxGroupSize {
		bad("group_size must be 0 (default) or between 2 and %d, got %d", maxGroupSize, o.GroupSize)
	}
	between("min_turns", o.MinTurns, maxTurnsLimit)
	between("max_turns", o.MaxTurns, maxTurnsLimit)
	if r := o.withDefaults(); o.MinTurns >= 0 && o.MaxTurns >= 0 && r.MinTurns > r.MaxTurns {
		bad("min_turns %d exceeds max_turns %d", r.MinTurns, r.MaxTurns)
	}
	if math.IsNaN(o.InfraFailureRate) || o.InfraFailureRate > 1 {
		bad("infra_failure_rate must be at most 1 (negative: none), got %v", o.InfraFailureRate)
	}
	if o.ContextBudget != 0 && (o.ContextBudget < minContextBudget || o.ContextBudget > math.MaxInt32) {
		bad("context_budget must be 0 (default) or between %d and %d tokens, got %d", minContextBudget, math.MaxInt32, o.ContextBudget)
	}
	for i := 0; i < len(o.Token); i++ {
		if c := o.Token[i]; c < 0x21 || c > 0x7e {
			bad("token: byte %d is not a printable ASCII character", i)
			break
		}
	}
	return errors.Join(errs...)
}

// withDefaults returns o with every zero field replaced by its default.
// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options { return o.withDefaults() }

func (o Options) withDefaults() Options {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if o.URL == "" {
		o.URL = DefaultURL
	}
	def(&o.Tasks, DefaultTasks)
	def(&o.Steps, DefaultSteps)
	def(&o.BatchGroups, DefaultBatchGroups)
	def(&o.GroupSize, DefaultGroupSize)
	def(&o.Workers, DefaultWorkers)
	def(&o.MinTurns, DefaultMinTurns)
	def(&o.MaxTurns, DefaultMaxTurns)
	def(&o.ContextBudget, DefaultContextBudget)
	def(&o.EventsPerRequest, DefaultEventsPerRequest)
	if o.InfraFailureRate == 0 {
		o.InfraFailureRate = DefaultInfraFailureRate
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// failureRate is the effective per-attempt infrastructure failure chance.
func (o Options) failureRate() float64 {
	return max(o.InfraFailureRate, 0)
}
