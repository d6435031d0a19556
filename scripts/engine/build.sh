#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (the real inference engine the proxy's
# tests talk to) from the source the llama-cpp-python sdist on PyPI vendors,
# and cache the binary outside the clone, keyed by version. Reuses the cached
# binary when it is present and answers `--version`.
#
#   scripts/engine/build.sh          # prints the binary's path on stdout
#
# Environment (all optional):
#   ROLLOUTLEDGER_CACHE   cache root                      [$HOME/.cache/rolloutledger]
#   ENGINE_BUILD_JOBS     parallel compile jobs            [2]
#   PYTHON                python with pip                  [python3]
#
# Progress goes to stderr. About 10 CPU-minutes on 2 cores; one static
# ~15 MB binary. Needs cmake and g++ (installed with apt-get as root if
# missing) and PyPI (the sdist, about 77 MB, is downloaded without building).
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
CACHE=${ROLLOUTLEDGER_CACHE:-$HOME/.cache/rolloutledger}
DEST_DIR=$CACHE/engine/llama.cpp-$LLAMA_CPP_PYTHON_VERSION
DEST=$DEST_DIR/llama-server
JOBS=${ENGINE_BUILD_JOBS:-2}
PYTHON=${PYTHON:-python3}

log() { echo "engine: $*" >&2; }
die() { echo "engine: ERROR: $*" >&2; exit 1; }

works() { [ -x "$1" ] && "$1" --version >/dev/null 2>&1; }

if works "$DEST"; then
  log "reusing $DEST"
  echo "$DEST"
  exit 0
fi

apt_updated=""
apt_install() {
  [ "$(id -u)" = 0 ] || die "$* missing; install it (apt-get install $*) or run this as root"
  log "installing $* with apt-get"
  (
    flock -w 900 9 || die "timed out waiting for the apt lock"
    export DEBIAN_FRONTEND=noninteractive
    if [ -z "$apt_updated" ]; then apt-get update -qq >&2; fi
    apt-get install -y -qq --no-install-recommends "$@" >&2
  ) 9>/var/lock/rolloutledger-apt.lock
  apt_updated=1
}
command -v cmake >/dev/null || apt_install cmake
command -v g++ >/dev/null || apt_install g++
command -v make >/dev/null || apt_install make

mkdir -p "$CACHE/engine"
# One build at a time per cache (CI and a developer's shell may race).
exec 8>"$CACHE/engine/build.lock"
flock -w 3600 8 || die "timed out waiting for another build ($CACHE/engine/build.lock)"
if works "$DEST"; then
  log "reusing $DEST (built while waiting)"
  echo "$DEST"
  exit 0
fi

WORK=$(mktemp -d "$CACHE/engine/build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

start=$SECONDS
# --no-binary names only this package: pip prepares the sdist's metadata
# with its build backend (a wheel), never compiling anything.
log "downloading llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (sdist, not built)"
"$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary llama-cpp-python \
  -d "$WORK/dl" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >&2
sdist=$(ls "$WORK"/dl/llama_cpp_python-*.tar.gz 2>/dev/null | head -n 1)
[ -n "$sdist" ] || die "pip download gave no sdist in $WORK/dl"
log "extracting vendor/llama.cpp from $(basename "$sdist")"
top=$(basename "$sdist" .tar.gz)
tar -xzf "$sdist" -C "$WORK" "$top/vendor/llama.cpp"
SRC=$WORK/$top/vendor/llama.cpp
[ -f "$SRC/CMakeLists.txt" ] || die "no CMakeLists.txt in $SRC"

opts=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON)
# Options that exist only in some llama.cpp versions.
if grep -rqs 'LLAMA_OPENSSL' "$SRC/CMakeLists.txt" "$SRC"/common/CMakeLists.txt "$SRC"/tools/server/CMakeLists.txt; then
  opts+=(-DLLAMA_OPENSSL=OFF)
fi
# Never fetch the server's web UI at configure time (tests do not need it,
# and a build must not depend on more than PyPI).
if grep -qs 'LLAMA_USE_PREBUILT_UI' "$SRC/CMakeLists.txt"; then
  opts+=(-DLLAMA_USE_PREBUILT_UI=OFF)
fi
if grep -qs 'LLAMA_BUILD_TOOLS' "$SRC/CMakeLists.txt"; then
  # The server lives under tools/ in recent trees; only its target is built.
  opts+=(-DLLAMA_BUILD_TOOLS=ON)
fi
log "configuring: cmake ${opts[*]}"
cmake -S "$SRC" -B "$WORK/build" "${opts[@]}" >&2
log "building llama-server with -j$JOBS (about 10 CPU-minutes)"
cmake --build "$WORK/build" --target llama-server -j"$JOBS" >&2
bin=$WORK/build/bin/llama-server
works "$bin" || die "built $bin does not run --version"

mkdir -p "$DEST_DIR"
cp "$bin" "$DEST_DIR/.llama-server.tmp.$$"
mv -f "$DEST_DIR/.llama-server.tmp.$$" "$DEST"
log "built in $((SECONDS - start))s: $("$DEST" --version 2>&1 | tr '\n' ' ')"
echo "$DEST"
