package pgsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/semaphore"

	"github.com/rolloutledger/rolloutledger/internal/telemetry"
	"github.com/rolloutledger/rolloutledger/services/kafkalog"
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
	// Window bounds the records one transaction stores [5,000].
	Window int
	// WindowBytes bounds the record bytes one transaction reads [32 MiB].
	WindowBytes int
	// MinBackoff and MaxBackoff bound the wait before reconnecting after a
	// failure [100 ms, 5 s]; the wait doubles per consecutive failure.
	MinBackoff, MaxBackoff time.Duration
	// OnCommit, when set, is called after each committed transaction, from
	// the sink's goroutine.
	OnCommit func(Commit)
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
type TopicPartition struct {
	Topic     string
	Partition int
}

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
		o.Window = 5000
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
	return &Sink{o: o, log: o.Logger.With("component", "pgsink", "schema", o.Schema),
		tel: tel, lag: tel.ConsumerLag(telemetry.ConsumerPgsink), database: database,
		stored: map[TopicPartition]int64{}, changed: make(chan struct{})}, nil
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

// Run stores records until ctx ends; it returns nil then. Any failure —
// Postgres restarting or unreachable, Kafka unreachable, a transaction
// refused — ends the session: its transaction is rolled back, and after a
// backoff a new session reconnects and resumes from the offsets stored in
// Postgres, so nothing is lost and nothing stored twice.
func (s *Sink) Run(ctx context.Context) error {
	pctx, stopPoll := context.WithCancel(ctx)
	var poll sync.WaitGroup
	defer poll.Wait()
	defer stopPoll()
	poll.Go(func() {
		s.lag.Poll(pctx, telemetry.LagPollInterval, func(ctx context.Context) (map[string]map[int]int64, error) {
			out := map[string]map[int]int64{}
			for _, topic := range []string{s.o.Kafka.FactsTopic(), s.o.Kafka.DecisionsTopic()} {
				ends, err := kafkalog.EndOffsets(ctx, s.o.Kafka, topic)
				if err != nil {
					return nil, err
				}
				out[topic] = ends
			}
			return out, nil
		})
	})
	backoff := s.o.MinBackoff
	for {
		before := s.commits.Load()
		err := s.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		s.failures.Add(1)
		if s.commits.Load() > before {
			backoff = s.o.MinBackoff
		}
		s.log.Warn("session ended; reconnecting", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, s.o.MaxBackoff)
	}
}

// received is a record read from one of the topics.
type received struct {
	m     kafka.Message
	facts bool
	cost  int64 // bytes of the read budget it holds until decoded
}

// session is one connection's life: prepare, resume from the stored
// offsets, and store windows until something fails.
func (s *Sink) session(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	conn, err := connect(ctx, s.o.DatabaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for i := range tables {
		if _, err := conn.Exec(ctx, tables[i].createStage(s.o.Schema)); err != nil {
			return fmt.Errorf("create staging table for %s: %w", tables[i].name, err)
		}
	}
	offsets, err := s.resume(ctx, conn)
	if err != nil {
		return err
	}
	var from int64
	for _, next := range offsets {
		from += next
	}
	s.log.Info("storing", "partitions", len(offsets), "records_stored_before", from)
	s.noteStored(offsets)
	for tp, next := range offsets {
		s.lag.Committed(tp.Topic, tp.Partition, next)
	}

	// Records read but not yet decoded are bounded in number and in bytes
	// (turns with inline tokens run to tens of kilobytes each).
	in := make(chan received, 2*s.o.Window)
	budget := semaphore.NewWeighted(int64(2 * s.o.WindowBytes))
	var readers sync.WaitGroup
	defer readers.Wait()
	defer cancel(nil)
	for tp, next := range offsets {
		facts := tp.Topic == s.o.Kafka.FactsTopic()
		readers.Go(func() {
			if err := s.read(ctx, tp, next, facts, budget, in); err != nil {
				cancel(err)
			}
		})
	}

	// Windows are decoded while the previous one is being written.
	windows := make(chan *window, 1)
	var preparing sync.WaitGroup
	defer preparing.Wait()
	defer cancel(nil)
	preparing.Go(func() {
		defer close(windows)
		for {
			batch, err := s.collect(ctx, in)
			if err != nil {
				return
			}
			win := prepare(batch, s.tel)
			var cost int64
			for _, r := range batch {
				cost += r.cost
			}
			budget.Release(cost)
			select {
			case windows <- win:
			case <-ctx.Done():
				return
			}
		}
	})

	w := &writer{s: s, conn: conn, offsets: offsets}
	for win := range windows {
		if win.records == 0 {
			err = w.verify(ctx)
		} else {
			err = w.write(ctx, win)
		}
		if err != nil {
			return err
		}
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return ctx.Err()
}

// read feeds one partition's records, in order, from next on.
func (s *Sink) read(ctx context.Context, tp TopicPartition, next int64, facts bool, budget *semaphore.Weighted, out chan<- received) error {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: s.o.Kafka.Brokers, Topic: tp.Topic, Partition: tp.Partition,
		MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 200 * time.Millisecond,
		ReadLagInterval: -1, Dialer: s.o.Kafka.Dialer(),
	})
	defer r.Close()
	if err := r.SetOffset(next); err != nil {
		return fmt.Errorf("seek %s/%d to %d: %w", tp.Topic, tp.Partition, next, err)
	}
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read %s/%d: %w", tp.Topic, tp.Partition, err)
		}
		cost := min(int64(len(m.Value)), int64(2*s.o.WindowBytes))
		if err := budget.Acquire(ctx, cost); err != nil {
			return nil
		}
		select {
		case out <- received{m: m, facts: facts, cost: cost}:
		case <-ctx.Done():
			return nil
		}
	}
}

// idleCheck is how long a quiet session waits before it checks that its
// offsets are still the stored ones (and so that Postgres still answers).
const idleCheck = time.Second

// collect blocks for one record, then takes what else has arrived, up to
// the window's bounds: a busy log is stored in large transactions, a quiet
// one within milliseconds of each record. After idleCheck without a record
// it returns an empty window.
func (s *Sink) collect(ctx context.Context, in <-chan received) ([]received, error) {
	var out []received
	idle := time.NewTimer(idleCheck)
	defer idle.Stop()
	select {
	case r := <-in:
		out = append(out, r)
	case <-idle.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	size := len(out[0].m.Value)
	for len(out) < s.o.Window && size < s.o.WindowBytes {
		select {
		case r := <-in:
			out = append(out, r)
			size += len(r.m.Value)
		default:
			return out, nil
		}
	}
	return out, nil
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

// CrashEnv names the fault-injection knob of the crash tests: when set to
// N, the process kills itself (SIGKILL) in its N-th transaction, after the
// rows and the offsets were written and before COMMIT.
const CrashEnv = "ROLLOUTLEDGER_PGSINK_CRASH_AFTER_WINDOWS"

var crashAfter = func() int64 {
	n, _ := strconv.ParseInt(os.Getenv(CrashEnv), 10, 64)
	return n
}()

var windows atomic.Int64

func (s *Sink) maybeCrash() {
	if crashAfter <= 0 || windows.Add(1) < crashAfter {
		return
	}
	s.log.Warn("fault injection: killing the process before COMMIT", "env", CrashEnv)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
