// Package faults holds the ledger's fault tests: broker, process, database
// and disk failures and duplicate deliveries, each against real servers
// (a Kafka cluster of three brokers of the test's own, a private
// PostgreSQL, a tmpfs for the projector's state), and the soak test of a
// sustained load (go test -run TestSoak -soak=10m ./internal/faults/).
// RELIABILITY.md at the repository root lists what each test proves.
package faults
