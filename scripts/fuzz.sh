#!/usr/bin/env bash
# Run every native Go fuzz target of the module for a while each:
#   scripts/fuzz.sh              # every target, FUZZTIME (default 10s) each
#   FUZZTIME=5m scripts/fuzz.sh ./events/
# FUZZMINIMIZETIME (default 2s) bounds the minimization of each newly
# interesting input, which otherwise takes up to a minute of a short run.
# Targets are found with `go test -list '^Fuzz'`, so a new one runs
# without editing this script. A failure leaves the failing input under
# the package's testdata/fuzz/<Target>/, where `go test` replays it from
# then on; commit it with the fix. Needs no servers.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

fuzztime=${FUZZTIME:-10s}
minimize=${FUZZMINIMIZETIME:-2s}
[ $# -gt 0 ] || set -- ./...

# Packages whose tests declare a fuzz target (a cheap look before asking
# `go test -list`, which compiles the package's tests).
pkgs=()
while read -r dir path; do
  if grep -qE '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' "$dir"/*_test.go 2>/dev/null; then
    pkgs+=("$path")
  fi
done < <(go list -f '{{.Dir}} {{.ImportPath}}' "$@")
[ ${#pkgs[@]} -gt 0 ] || { echo "fuzz: no fuzz targets in $*" >&2; exit 1; }

failed=()
ran=0
for pkg in "${pkgs[@]}"; do
  mapfile -t targets < <(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true)
  for target in "${targets[@]}"; do
    start=$SECONDS
    echo "+ go test -run '^$' -fuzz '^${target}\$' -fuzztime $fuzztime -fuzzminimizetime $minimize $pkg" >&2
    dir=$(go list -f '{{.Dir}}' "$pkg")/testdata/fuzz/$target
    before=$(ls "$dir" 2>/dev/null | sort || true)
    out=$(mktemp)
    if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" "$pkg" 2>&1 | tee "$out"; [ "${PIPESTATUS[0]}" -eq 0 ]; then
      echo "== $pkg $target: ok ($((SECONDS - start))s)"
    elif [ "$(ls "$dir" 2>/dev/null | sort || true)" = "$before" ] &&
      grep -qx '    context deadline exceeded' "$out" &&
      ! grep -q -e '^panic:' -e '^    [a-z_]*_test\.go:[0-9]*:' -e 'Failing input written' "$out" &&
      go test -run "^${target}\$" "$pkg" >/dev/null; then
      # Go 1.26's fuzz coordinator can report its own -fuzztime deadline
      # as a failure when a worker is still mid-call as the time runs out
      # (go.dev/issue/75804, fixed in Go 1.27). Such a run wrote no
      # failing input and printed no test failure; the corpus, replayed
      # above without fuzzing, passes. Anything else is a real failure.
      echo "== $pkg $target: ok ($((SECONDS - start))s; the coordinator's end-of-time race, go.dev/issue/75804, no failing input)"
    else
      echo "== $pkg $target: FAILED ($((SECONDS - start))s)"
      failed+=("$pkg $target")
    fi
    rm -f "$out"
    ran=$((ran + 1))
  done
done

echo "== $ran fuzz targets, ${#failed[@]} failed, ${SECONDS}s"
if [ ${#failed[@]} -gt 0 ]; then
  printf '   %s\n' "${failed[@]}"
  exit 1
fi
