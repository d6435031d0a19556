// Command rolloutledger is the ledger's one binary: the services, the
// embedded dev stack, the simulator, and the auditor's tools.
package main

import (
	"os"

	"github.com/rolloutledger/rolloutledger/cmd/rolloutledger/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
