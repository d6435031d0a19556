#!/usr/bin/env bash
# Run the Go test suite: `go test -race -count=1 -timeout 30m ./...` from the
# repo root (the replay package alone runs for minutes under -race on two
# cores, past go test's default 10-minute bound).
# Extra arguments are passed to `go test`; ./... is appended unless they
# already name packages, e.g.
#   scripts/test.sh -run TestLedger -v
#   scripts/test.sh ./internal/ledger/...
# Does not start anything: integration tests read KAFKA_BROKERS and
# DATABASE_URL, see `eval "$(scripts/services.sh)"`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

has_pkg=false
for arg in "$@"; do
  case "$arg" in
    . | ./* | ../* | */...) has_pkg=true ;;
  esac
done
$has_pkg || set -- "$@" ./...

echo "+ go test -race -count=1 -timeout 30m $*" >&2
exec go test -race -count=1 -timeout 30m "$@"
