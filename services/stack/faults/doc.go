// Package faults holds the ledger's fault tests: broker, process, database
// and disk failures and duplicate deliveries, each against real servers
// (a Kafka cluster of three brokers of the test's own, a private
// PostgreSQL, a tmpfs for the projector's state), and the soak test of a
// sustained load, which runs only when asked for (the package comes
// before the test binary's flags):
//
//	go test ./services/stack/faults/ -v -run TestSoak -soak=10m -timeout=0
//
// RELIABILITY.md at the repository root lists what each test proves.
package faults
