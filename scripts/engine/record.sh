#!/usr/bin/env bash
# Re-record the inference proxy's engine fixtures (services/proxy/testdata):
# starts llama-server twice (SmolLM2 and the tiny random model) on loopback,
# records their answers (record_fixtures.py), writes the vLLM and SGLang
# answers from those values (vllm_sglang.py), and stops the servers.
#
#   scripts/engine/record.sh [OUT]      # OUT defaults to services/proxy/testdata
#
# Needs scripts/engine/build.sh and scripts/engine/models.sh to have run
# (it runs them; both reuse their cache). Progress goes to stderr.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/../.." && pwd)
OUT=${1:-$REPO/services/proxy/testdata}
PYTHON=${PYTHON:-python3}

LLAMA_SERVER=$("$SCRIPT_DIR/build.sh")
export LLAMA_SERVER
eval "$("$SCRIPT_DIR/models.sh")"

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start() { # name model port extra...
  local name=$1 model=$2 port=$3
  shift 3
  "$LLAMA_SERVER" -m "$model" --host 127.0.0.1 --port "$port" -c 4096 -np 2 -t 2 --jinja "$@" \
    >"$work/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 600); do
    if curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1; then return 0; fi
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$work/$name.log" >&2; echo "record: $name exited" >&2; exit 1; }
    sleep 0.2
  done
  cat "$work/$name.log" >&2
  echo "record: $name not healthy" >&2
  exit 1
}

smol_port=$(free_port)
start smollm2 "$ROLLOUTLEDGER_SMOLLM2_GGUF" "$smol_port" --no-repack
tiny_port=$(free_port)
start tiny "$ROLLOUTLEDGER_TINY_GGUF" "$tiny_port"

"$PYTHON" "$SCRIPT_DIR/record_fixtures.py" --smol "http://127.0.0.1:$smol_port" \
  --tiny "http://127.0.0.1:$tiny_port" --out "$OUT" --facts "$work/facts.json" \
  --scrub "$(dirname "$(dirname "$ROLLOUTLEDGER_SMOLLM2_GGUF")")"
"$PYTHON" "$SCRIPT_DIR/vllm_sglang.py" "$work/facts.json" "$OUT"
echo "record: wrote $OUT/{llamacpp,vllm,sglang}" >&2
