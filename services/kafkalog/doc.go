// Package kafkalog is the ledger's only door to Kafka for writing, and the
// small set of reads its callers need (topic bootstrap, end offsets, reading
// a partition back).
//
// # Durability
//
// A [Writer] acknowledges an [Writer.Append] only once every record is
// acknowledged by all in-sync replicas (acks=all). kafka-go's Writer defaults
// are unsafe for a ledger (no acks, a one-second batch timeout); [NewWriter]
// sets acks=all, a millisecond batch timeout, lz4 compression, bounded
// retries, and the Murmur2 balancer, which maps a run id to the same
// partition as the Java and Python clients do.
//
// # Ordering
//
// All records of one run share a key and so a partition. kafka-go writes a
// partition's batches one at a time, in the order they were formed, so the
// records of one Append keep their order, and an Append that starts after
// another returned is ordered after it. Concurrent Appends for one run are not
// ordered with respect to each other; producers that need order wait for the
// acknowledgment before sending more, as the HTTP contract asks.
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
