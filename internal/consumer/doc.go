// Package consumer is the ledger's one exactly-once consumer loop: the
// projector and the Postgres sink both read the log through it.
//
// A consumer reads partitions from offsets its [Store] keeps beside its
// state (never Kafka's consumer-group offsets), cuts what it reads into
// windows (by records, bytes, age and a quiet gap: see
// [kafkalog.WindowOptions]), and hands each window to the Store's
// [Session], which applies it and commits state and offsets in one atomic
// step. The [Store] documentation is the contract: what must be
// deterministic, what must be atomic, who owns the offsets, and what a
// crash between a window's effects and its commit leads to.
//
// # Sessions, failures and restarts
//
// A session is one [Store.Open] and the windows applied through it. Any
// failure — a read error, a refused commit, a lost connection — ends the
// session. With [Options.Restart] the consumer waits (doubling from
// MinBackoff to MaxBackoff, back to MinBackoff after a session that
// committed something) and opens a new session, which resumes from the
// offsets the Store holds; the window that failed is read again. Without
// it, [Run] returns the error.
//
// # Resuming
//
// When a session opens, the consumer compares each stored offset with the
// partition's log end, and reads back the record of a [Stored.Mark]. An
// offset past the log end, or a marked record that differs, means the
// partition holds another log than the one the offset counts in (a
// development broker re-created under the same topic names). A Session
// that is a [Rewinder] starts that partition over from offset 0; any other
// is read on from its stored offset, with a warning.
//
// # Windows and partitions
//
// Records of one partition reach Apply in offset order, each exactly once
// per session. With [Options.PerPartition] every partition has its own
// session and windows, applied in parallel (the projector: a run lives in
// one partition, so partitions are independent); otherwise one session's
// windows mix every partition (the sink: one transaction stores records of
// many partitions). A [Preparer] has its next window prepared while the
// previous one is applied; an [Idler] hears of quiet logs.
//
// # Observability and tests
//
// The consumer reports every partition's stored offset and log end to
// [Options.Lag] (the rolloutledger_consumer_lag gauge). Crash tests pass a
// hook as [Options.CommitPoint] — [CrashAfter] kills the process at the
// n-th [Window.CommitPoint] — rather than setting anything the library
// reads from the environment.
package consumer
