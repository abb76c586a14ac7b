#!/usr/bin/env bash
# deploy/bench_replicas.sh: prefix affinity against round robin over the same
# replicas, in one run: local.sh starts the replicas and an affinity HAProxy;
# a second HAProxy from the same rendered configuration balances round robin
# on the next port. Each round runs prefix_bench's `conversations` scenario
# through both (the order alternating), with fresh texts every time, and
# prints one JSON line per run with "balance", "bench_round" and "key_bytes"
# added (after one unreported warm-up run through each).
#
#   deploy/bench_replicas.sh -m MODEL [--replicas 3] [--port 18300] [--rounds 3]
#       [--key-bytes 256] [--clients 8] [--turns 5] [--prompt-tokens 200]
#       [--shared-system 0|1] [--max-tokens 32] [rotor serve options]
#
# ROTOR and PREFIX_BENCH name the binaries (default: this checkout's build/).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prefix_bench="${PREFIX_BENCH:-$here/../build/tests/server/prefix_bench}"
replicas=3 port=18300 rounds=3 key_bytes=256 clients=8 turns=5 prompt_words=200
shared=0 max_tokens=32 model=""
serve_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -m|--model) model="$2"; shift 2 ;;
    --replicas) replicas="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --key-bytes) key_bytes="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --turns) turns="$2"; shift 2 ;;
    --prompt-tokens) prompt_words="$2"; shift 2 ;;
    --shared-system) shared="$2"; shift 2 ;;
    --max-tokens) max_tokens="$2"; shift 2 ;;
    *) serve_args+=("$1"); shift ;;
  esac
done
[ -n "$model" ] || { echo "bench_replicas: -m MODEL is required" >&2; exit 2; }
[ -x "$prefix_bench" ] || { echo "bench_replicas: no prefix_bench at $prefix_bench" >&2; exit 2; }

dir="$(mktemp -d "${TMPDIR:-/tmp}/rotor-bench-replicas.XXXXXX")"
ROTOR_LOCAL_DIR="$dir" "$here/local.sh" --replicas "$replicas" --port "$port" -m "$model" \
  --key-bytes "$key_bytes" "${serve_args[@]}" >"$dir/local.out" 2>&1 &
local_pid=$!
rr_pid=""
cleanup() {
  [ -n "$rr_pid" ] && kill "$rr_pid" 2>/dev/null || true
  kill -TERM "$local_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 1 3000); do
  grep -q "rotor local: ready" "$dir/local.out" 2>/dev/null && break
  kill -0 "$local_pid" 2>/dev/null || { cat "$dir/local.out" >&2; exit 1; }
  sleep 0.1
done
grep -q "rotor local: ready" "$dir/local.out" || { cat "$dir/local.out" >&2; exit 1; }
sed 's/^\( *\)balance hash .*/\1balance roundrobin/' "$dir/haproxy.cfg" >"$dir/haproxy-rr.cfg"
ROTOR_LB_ADDR=127.0.0.1 ROTOR_LB_PORT=$((port + 1)) ROTOR_KEY_BYTES="$key_bytes" ROTOR_BALANCE_FACTOR=0 \
  ROTOR_CHECK_INTER=2s haproxy -db -f "$dir/haproxy-rr.cfg" >"$dir/haproxy-rr.log" 2>&1 &
rr_pid=$!
sleep 3  # its first health checks
grep "rotor local: replica" "$dir/local.out" >&2

run() {  # balance port round seed
  "$prefix_bench" --port "$2" --scenario conversations --rounds 1 --clients "$clients" \
    --turns "$turns" --prompt-tokens "$prompt_words" --shared-system "$shared" \
    --max-tokens "$max_tokens" --seed "$4" |
    sed "s/^{/{\"balance\":\"$1\",\"bench_round\":$3,\"key_bytes\":$key_bytes,/"
}
# One run through each, not reported: the replicas' first requests fault in
# the model's pages.
run affinity "$port" 0 1000 >/dev/null
run roundrobin $((port + 1)) 0 1001 >/dev/null
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then
    run affinity "$port" "$r" $((2 * r)); run roundrobin $((port + 1)) "$r" $((2 * r + 1))
  else
    run roundrobin $((port + 1)) "$r" $((2 * r + 1)); run affinity "$port" "$r" $((2 * r))
  fi
done
