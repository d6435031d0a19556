// Package kafkalog is the ledger's only door to Kafka. No other package of
// the ledger imports a Kafka client (tests aside, which use kafka-go and
// franz-go as independent second clients); they speak in this package's
// types:
//
//   - [Record], [Message], [Header] and [Position]: what is appended and
//     what is read back, with its topic, partition, offset, high watermark
//     and timestamp;
//   - [PartitionOf]: the run → partition mapping, the Java client's murmur2,
//     used by the [Writer] and by every reader that looks a run up;
//   - [TypeHeaders]: the type and v headers of every record; the
//     traceparent header is set by the [Writer] (see Tracing);
//   - [Writer]: appends with acks=all;
//   - [Tailer] and [Tail]: read one partition, or several, from given
//     offsets, cutting windows by count, bytes, age and quiet gap for the
//     services that consume (package internal/consumer); [ReadPartition],
//     [ReadAt] and [ReadAll] read bounded ranges for tools and replay;
//   - [EnsureTopics], [EndOffsets], [ReadMetadata] and [DeleteTopics]: the
//     admin side;
//   - [Config.Dialer] and [Config.Transport]: every connection, with TLS
//     and SASL;
//   - [ErrNotAcknowledged] and [ErrRecordTooLarge]: the failures callers
//     branch on, whatever the client reports.
//
// # Changing the Kafka client
//
// Because nothing else sees the client, replacing kafka-go (for example
// with franz-go, whose idempotent producer would stop a broker failover
// from leaving duplicate records) touches this package only: the writer
// (writer.go), the tailer (tail.go), the admin calls (topics.go) and the
// dialer (security.go). What must hold afterwards is written down here and
// tested in this package: acks=all, [PartitionOf] placement (a change of
// partitioner would move runs between partitions), headers passed through
// byte for byte, per-partition order, and errors mapped to the sentinels
// above.
//
// # Durability
//
// A [Writer] acknowledges an [Writer.Append] only once every record is
// acknowledged by all in-sync replicas (acks=all). The Writer speaks
// kafka-go's protocol layer rather than using kafka.Writer, whose defaults
// are unsafe for a ledger (no acks, a one-second batch timeout) and whose
// per-batch buffers of BatchSize messages cost more than the records at
// small sizes; it sends acks=all, lz4-compressed produce requests that
// carry every partition of a leader at once, retries a partition's batch a
// bounded number of times, and places records with [PartitionOf], which
// maps a run id to the same partition as the Java and Python clients do.
//
// # Ordering
//
// All records of one run share a key and so a partition. The Writer keeps
// a partition in at most one produce request at a time and sends its
// queued records in the order they were appended, retries included, so the
// records of one Append keep their order, and an Append that starts after
// another returned is ordered after it. Concurrent Appends for one run are not
// ordered with respect to each other; producers that need order wait for the
// acknowledgment before sending more, as the HTTP contract asks. Readers
// return each partition's records in offset order.
//
// # Reading on a loaded machine
//
// A [Tailer] asks each fetch for at most 1 MiB (a larger record still
// comes whole) and lets its answer arrive up to a second after the time
// the broker may hold it. kafka-go drops a connection whose fetch answers
// later and fetches again, so an allowance shorter than a loaded broker's
// answer time, or answers too large to build within it, would keep a
// reader at one offset for as long as the load lasts. The tests in
// slow_test.go hold both with a broker that answers late.
//
// # Tracing
//
// [Writer.Append] sets the W3C trace context of its context (through
// telemetry's propagator) in every record's headers, replacing a
// traceparent the record had; [SpanContext] reads it back on the consuming
// side. Record values never change.
//
// # Security
//
// [Config.TLS] and [Config.SASL] (SCRAM, see [Security] and [NewSCRAM]) apply
// to every connection the ledger makes: every reader, writer and admin client
// dials through [Config.Dialer] or [Config.Transport], and no package builds
// its own.
//
// # Retries
//
// kafka-go has no idempotent producer, so a retried write can duplicate
// records. That is safe by design: every fact carries its id, and every
// consumer drops identical duplicates.
package kafkalog
