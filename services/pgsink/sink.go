package pgsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rolloutledger/rolloutledger/internal/consumer"
	"github.com/rolloutledger/rolloutledger/internal/kafkalog"
	"github.com/rolloutledger/rolloutledger/internal/telemetry"
)

// DefaultSchema is the schema of the read model unless configured.
const DefaultSchema = "rolloutledger"

// Options configure a [Sink]. The zero value of every field but Kafka and
// DatabaseURL means its default.
type Options struct {
	// Kafka locates the brokers and names the facts and decisions topics.
	Kafka kafkalog.Config
	// DatabaseURL is the Postgres connection string (URL or key=value).
	DatabaseURL string
	// Schema is the schema written [DefaultSchema]. It must be migrated
	// ([Migrate]) before the sink runs.
	Schema string
	// Window bounds the records one transaction stores [20,000]. A window
	// takes only records already read, so it is this large only while the
	// sink catches up, where fewer, larger transactions store faster.
	Window int
	// WindowBytes bounds the record bytes one transaction reads [32 MiB].
	WindowBytes int
	// MinBackoff and MaxBackoff bound the wait before reconnecting after a
	// failure [100 ms, 5 s]; the wait doubles per consecutive failure.
	MinBackoff, MaxBackoff time.Duration
	// OnCommit, when set, is called after each committed transaction, from
	// the sink's goroutine.
	OnCommit func(Commit)
	// CrashAfterWindows is fault injection for crash tests: when positive,
	// the process kills itself (SIGKILL) in its CrashAfterWindows-th
	// transaction, after the rows and the offsets were written and before
	// COMMIT.
	CrashAfterWindows int
	// Logger; nil discards.
	Logger *slog.Logger
	// Telemetry receives the write spans and metrics; nil records nothing.
	Telemetry *telemetry.Telemetry
}

// Commit describes one committed transaction.
type Commit struct {
	// Records is how many records it stored (skipped ones included); Rows
	// how many rows it inserted (duplicates of stored rows not counted).
	Records int
	Rows    int64
	// Next is the next offset of each partition the transaction advanced.
	Next map[TopicPartition]int64
	// At is when the commit returned: the rows are visible from then on.
	At time.Time
}

// TopicPartition names one partition of a topic.
type TopicPartition = kafkalog.TopicPartition

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Validate reports every problem at once.
func (o Options) Validate() error {
	var errs []error
	if err := o.Kafka.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.DatabaseURL == "" {
		errs = append(errs, errors.New("pgsink: no database URL"))
	} else if _, err := pgx.ParseConfig(o.DatabaseURL); err != nil {
		errs = append(errs, fmt.Errorf("pgsink: database URL: %w", err))
	}
	if o.Schema != "" && !schemaName.MatchString(o.Schema) {
		errs = append(errs, fmt.Errorf("pgsink: schema %q: want [a-z_][a-z0-9_]{0,62}", o.Schema))
	}
	if o.Window < 0 || o.WindowBytes < 0 || o.MinBackoff < 0 || o.MaxBackoff < 0 {
		errs = append(errs, errors.New("pgsink: window and backoff bounds must not be negative"))
	}
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.Window == 0 {
		o.Window = 20000
	}
	if o.WindowBytes == 0 {
		o.WindowBytes = 32 << 20
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Sink copies the facts and decisions topics into Postgres.
type Sink struct {
	o        Options
	log      *slog.Logger
	tel      *telemetry.Telemetry
	lag      *telemetry.Lag
	database string // db.namespace of the write spans

	records, rows, commits, failures atomic.Int64

	mu      sync.Mutex
	stored  map[TopicPartition]int64 // as this sink last resumed or committed
	changed chan struct{}            // closed and replaced when stored changes

	crash func() // the commit point hook of CrashAfterWindows
}

// New returns a sink; it connects when it runs.
func New(o Options) (*Sink, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	tel := telemetry.OrNop(o.Telemetry)
	var database string
	if cfg, err := pgx.ParseConfig(o.DatabaseURL); err == nil {
		database = cfg.Database
	}
	log := o.Logger.With("component", "pgsink", "schema", o.Schema)
	return &Sink{o: o, log: log,
		tel: tel, lag: tel.ConsumerLag(telemetry.ConsumerPgsink), database: database,
		stored: map[TopicPartition]int64{}, changed: make(chan struct{}),
		crash: consumer.CrashAfter(o.CrashAfterWindows, log)}, nil
}

// noteStored records offsets this sink resumed from or committed.
func (s *Sink) noteStored(next map[TopicPartition]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for tp, n := range next {
		s.stored[tp] = n
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// WaitStored waits until this sink has stored every record before ends
// (see [EndOffsets]). Unlike [WaitCaughtUp], which reads the offsets in
// Postgres, it counts only what this sink itself resumed from (after
// checking that the log is the one the offsets count in) or committed.
func (s *Sink) WaitStored(ctx context.Context, ends map[TopicPartition]int64) error {
	for {
		s.mu.Lock()
		var behind int64
		for tp, end := range ends {
			if n := s.stored[tp]; n < end {
				behind += end - n
			}
		}
		changed := s.changed
		s.mu.Unlock()
		if behind == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("pgsink: %d records not stored yet: %w", behind, ctx.Err())
		}
	}
}

// Stats are the sink's counters since it was created.
type Stats struct {
	Records, Rows, Commits, Failures int64
}

// Stats reports the sink's counters.
func (s *Sink) Stats() Stats {
	return Stats{Records: s.records.Load(), Rows: s.rows.Load(), Commits: s.commits.Load(), Failures: s.failures.Load()}
}

// idleCheck is how long a quiet session waits before it checks that its
// offsets are still the stored ones (and so that Postgres still answers).
const idleCheck = time.Second

// Run stores records until ctx ends; it returns nil then. Any failure —
// Postgres restarting or unreachable, Kafka unreachable, a transaction
// refused — ends the session: its transaction is rolled back, and after a
// backoff a new session reconnects and resumes from the offsets stored in
// Postgres, so nothing is lost and nothing stored twice.
//
// The loop is package consumer's: one session reads every partition of
// both topics and stores windows of up to Window records or WindowBytes
// bytes, each decoded on every core while the previous one is written.
func (s *Sink) Run(ctx context.Context) error {
	return consumer.Run(ctx, store{s}, consumer.Options{
		Kafka:       s.o.Kafka,
		Topics:      []string{s.o.Kafka.FactsTopic(), s.o.Kafka.DecisionsTopic()},
		Window:      kafkalog.WindowOptions{MaxRecords: s.o.Window, MaxBytes: s.o.WindowBytes, Idle: idleCheck},
		MaxWait:     200 * time.Millisecond,
		Restart:     true,
		MinBackoff:  s.o.MinBackoff,
		MaxBackoff:  s.o.MaxBackoff,
		Lag:         s.lag,
		Logger:      s.log,
		CommitPoint: s.crash,
		OnResume:    s.resumed,
		OnFailure:   func(error) { s.failures.Add(1) },
	})
}

// resumed notes where a session resumed, after the consumer checked that
// the log is the one the stored offsets count in.
func (s *Sink) resumed(offsets map[TopicPartition]int64) {
	var from int64
	for _, next := range offsets {
		from += next
	}
	s.log.Info("storing", "partitions", len(offsets), "records_stored_before", from)
	s.noteStored(offsets)
}

// connect opens one connection in which every statement is parsed at
// execution: names resolve against the catalog as it is now, so a schema
// swapped in by a rebuild is the one written after the swap.
func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = "rolloutledger-pgsink"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to Postgres: %w", err)
	}
	return conn, nil
}
