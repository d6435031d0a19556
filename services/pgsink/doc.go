// Package pgsink is the Postgres projection: it copies every fact and every
// decision of the ledger into the analysts' read model (docs/design.md §13), one
// row per fact or decision, seconds after it was acknowledged.
//
// # Schema
//
// The tables and views are the embedded migrations (package migrations),
// applied by [Migrate] into one schema, `rolloutledger` by default. The
// sink writes; analysts read through the NOLOGIN role
// rolloutledger_reader, which may only SELECT.
//
// # Exactly once
//
// The sink consumes every partition of the facts and decisions topics from
// offsets it keeps itself, in the table consumed_offsets, never in Kafka's
// group offsets, through package consumer, whose Store contract a session
// (one connection) keeps. Each transaction stores a window of records and moves the
// offsets of their partitions past them:
//
//  1. COPY the window's rows into temporary staging tables;
//  2. INSERT ... SELECT from each staging table into its table, ON CONFLICT
//     DO NOTHING: a fact is keyed by its event id, a decision by its id, so a
//     record that repeats a stored one (a producer's retry, a projector's
//     re-emission after a crash) adds nothing;
//  3. UPDATE consumed_offsets to the offsets past the window, only where the
//     stored offset is still the one the session read from;
//  4. COMMIT.
//
// A crash anywhere before COMMIT rolls all of it back and the next session
// reads the window again; after COMMIT the rows and the offsets are both
// there. So each record's rows are committed exactly once, whatever kills
// the process or the connection, and the compare-and-set of step 3 keeps a
// second sink, or a rebuild swapping its schema in, from ever committing a
// window twice: the loser's transaction is abandoned ([ErrOffsetsMoved]).
//
// # Failures
//
// Any failure — Postgres restarting or unreachable, Kafka unreachable, a
// statement refused — ends the session; [Sink.Run] backs off (doubling up to
// Options.MaxBackoff), reconnects, and resumes from the stored offsets.
//
// A partition whose log is not the one the stored offsets count in (a
// development broker re-created under the same topic names) is detected by
// the consumer, from the log end and the fingerprint of the first record
// the sink stored from it (first_offset, first_sha256), and read again from
// its start; the keys make that harmless.
//
// # Rebuild
//
// [Rebuild] fills a fresh schema from the log and swaps it in by renaming
// schemas in one transaction (`rolloutledger projections rebuild postgres`).
package pgsink
