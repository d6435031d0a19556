#!/usr/bin/env bash
# Instructions a Go benchmark spends per iteration, counted rather than
# timed: on a shared machine a timed run of a function moves by 10-30%
# from one run to the next, while its count of instructions does not.
#
#   scripts/instructions.sh PACKAGE BENCHMARK [LOW HIGH]
#   scripts/instructions.sh ./events/ '^BenchmarkDecode$/no-tokens' 20000 60000
#
# Runs the benchmark under valgrind's callgrind twice, for LOW and HIGH
# iterations (default 10000 and 30000), with the collector off and one
# processor, so that nothing but the iterations differs between the two
# runs, and without the runtime's preemption signals (callgrind aborts on
# some of them), and prints (count(HIGH) - count(LOW)) / (HIGH - LOW): the
# setup both runs share cancels out. Needs valgrind (Debian's package). A
# benchmark that allocates HIGH times what fits in memory needs smaller
# counts. Set KEEP=DIR to keep the two profiles for callgrind_annotate.
set -euo pipefail
pkg=${1:?package}
bench=${2:?benchmark regexp}
low=${3:-10000}
high=${4:-30000}
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go test -c -o "$work/bench.test" "$pkg"
dir=$(go list -f '{{.Dir}}' "$pkg")
count() {
	(cd "$dir" && GOGC=off GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$work/$1.out" \
		"$work/bench.test" -test.run='^$' -test.bench="$bench" -test.benchtime="${1}x" -test.cpu=1 >/dev/null 2>"$work/$1.err")
	sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$work/$1.err"
}
a=$(count "$low")
b=$(count "$high")
if [ -z "$a" ] || [ -z "$b" ]; then
	echo "instructions.sh: callgrind counted nothing; its output:" >&2
	cat "$work/$low.err" "$work/$high.err" >&2
	exit 1
fi
if [ -n "${KEEP:-}" ]; then
	mkdir -p "$KEEP" && cp "$work/$low.out" "$work/$high.out" "$KEEP/"
fi
echo "$bench: $(((b - a) / (high - low))) instructions an iteration ($low and $high iterations: $a and $b)"
