#!/usr/bin/env bash
# deploy/local.sh: several `rotor serve` replicas behind HAProxy, on loopback.
#
#   deploy/local.sh --replicas N --port P -m MODEL [--balance affinity|roundrobin]
#                   [--key-bytes B] [--check-interval TIME] [rotor serve options]
#
# Starts N replicas on free ports of 127.0.0.1 (rotor serve --port 0
# --replica-id rI), then HAProxy on 127.0.0.1:P with deploy/haproxy.cfg, waits
# until HAProxy sees every replica healthy, prints where to send requests and
# one line per replica, and runs until Ctrl-C or SIGTERM: HAProxy stops taking
# connections, the replicas drain (their --drain-timeout), everything stops.
# A second Ctrl-C kills what is left.
#
#   --balance affinity     prefix affinity (the default; a full replica is skipped)
#   --balance roundrobin   plain round robin (to compare)
#   --key-bytes B          bytes of the prompt in the affinity key (256)
#   --check-interval TIME  HAProxy's health-check interval (2s; 300ms in tests)
#   --balance-factor F     HAProxy's hash-balance-factor (0 = off, the default)
#
# Environment: ROTOR (the rotor binary; default build/rotor of this checkout),
# HAPROXY (default: haproxy on the PATH), ROTOR_LOCAL_DIR (keep the rendered
# configuration and the logs there instead of a temporary directory).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rotor="${ROTOR:-$here/../build/rotor}"
haproxy="${HAPROXY:-haproxy}"
replicas="" port="" model="" balance="affinity" key_bytes=256 check_inter="2s" balance_factor=0
drain_timeout=30
serve_args=()

die() { echo "rotor local: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --replicas) replicas="${2:-}"; shift 2 ;;
    --port) port="${2:-}"; shift 2 ;;
    -m|--model) model="${2:-}"; shift 2 ;;
    --balance) balance="${2:-}"; shift 2 ;;
    --key-bytes) key_bytes="${2:-}"; shift 2 ;;
    --check-interval) check_inter="${2:-}"; shift 2 ;;
    --balance-factor) balance_factor="${2:-}"; shift 2 ;;
    --drain-timeout) drain_timeout="${2:-}"; serve_args+=("$1" "${2:-}"); shift 2 ;;
    --host|--replica-id) die "$1 is set by local.sh (replicas listen on 127.0.0.1)" ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) serve_args+=("$1"); shift ;;
  esac
done
[[ "$replicas" =~ ^[1-9][0-9]*$ ]] || die "--replicas N (a positive number) is required"
[[ "$port" =~ ^[1-9][0-9]*$ ]] && [ "$port" -le 65535 ] || die "--port P (1-65535) is required"
[ -n "$model" ] || die "-m MODEL is required"
[ -r "$model" ] || die "cannot read the model $model"
[[ "$key_bytes" =~ ^[1-9][0-9]*$ ]] || die "--key-bytes must be a positive number"
[[ "$balance_factor" =~ ^[0-9]+$ ]] || die "--balance-factor must be 0 (off) or a percentage above 100"
case "$balance" in affinity|roundrobin) ;; *) die "--balance must be affinity or roundrobin" ;; esac
[ -x "$rotor" ] || die "no rotor binary at $rotor (build it, or set ROTOR)"
command -v "$haproxy" >/dev/null || die "haproxy is not installed (make deps installs it)"
command -v curl >/dev/null || die "curl is not installed (make deps installs it)"

if [ -n "${ROTOR_LOCAL_DIR:-}" ]; then
  dir="$ROTOR_LOCAL_DIR"; mkdir -p "$dir"; keep_dir=1
else
  dir="$(mktemp -d "${TMPDIR:-/tmp}/rotor-local.XXXXXX")"; keep_dir=0
fi
pids=() ports=() haproxy_pid=""

kill_all() {
  for pid in "${pids[@]}" $haproxy_pid; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ "$keep_dir" = 1 ] || rm -rf "$dir"
}

stop() {
  trap 'echo "rotor local: killing what is left"; kill_all; exit 130' INT
  trap '' TERM
  echo "rotor local: stopping: HAProxy takes no more connections, the replicas drain" \
       "(${drain_timeout} s at most; Ctrl-C again kills them)"
  [ -n "$haproxy_pid" ] && kill -USR1 "$haproxy_pid" 2>/dev/null || true
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  local deadline=$((SECONDS + ${drain_timeout%.*} + 5))
  while [ $SECONDS -lt $deadline ]; do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  kill_all
  echo "rotor local: stopped"
  exit "${1:-0}"
}
trap 'stop 0' INT TERM

# Replicas, each on a port of its own choosing; its "listening on" line says which.
for i in $(seq 1 "$replicas"); do
  "$rotor" serve -m "$model" --host 127.0.0.1 --port 0 --replica-id "r$i" "${serve_args[@]}" \
    >"$dir/r$i.log" 2>&1 &
  pids+=($!)
done
for i in $(seq 1 "$replicas"); do
  log="$dir/r$i.log" pid="${pids[$((i - 1))]}" p=""
  for _ in $(seq 1 3000); do  # 300 s: a large model takes a while to load
    p="$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -n 1)"
    [ -n "$p" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "rotor local: replica r$i failed" >&2; stop 1; }
    sleep 0.1
  done
  [ -n "$p" ] || { echo "rotor local: replica r$i did not start in 300 s" >&2; stop 1; }
  ports+=("$p")
done

cfg="$dir/haproxy.cfg"
cp "$here/haproxy.cfg" "$cfg"
if [ "$balance" = roundrobin ]; then
  sed -i 's/^\( *\)balance hash .*/\1balance roundrobin/' "$cfg"
fi
for i in $(seq 1 "$replicas"); do
  echo "  server r$i 127.0.0.1:${ports[$((i - 1))]}" >>"$cfg"
done
ROTOR_LB_ADDR=127.0.0.1 ROTOR_LB_PORT="$port" ROTOR_KEY_BYTES="$key_bytes" \
  ROTOR_CHECK_INTER="$check_inter" ROTOR_BALANCE_FACTOR="$balance_factor" "$haproxy" -db -f "$cfg" >"$dir/haproxy.log" 2>&1 &
haproxy_pid=$!

# Ready when HAProxy answers and counts every replica up (30 s at most).
stats="http://127.0.0.1:$port/haproxy-stats;csv"
up=0
for _ in $(seq 1 300); do
  kill -0 "$haproxy_pid" 2>/dev/null || { cat "$dir/haproxy.log" >&2; echo "rotor local: HAProxy failed" >&2; stop 1; }
  up="$(curl -s --max-time 1 "$stats" 2>/dev/null | awk -F, '$1 == "replicas" && $2 ~ /^r[0-9]+$/ && $18 == "UP"' | wc -l)" || up=0
  [ "$up" = "$replicas" ] && break
  sleep 0.1
done
[ "$up" = "$replicas" ] || { cat "$dir/haproxy.log" >&2; echo "rotor local: HAProxy sees $up of $replicas replicas up" >&2; stop 1; }

echo "rotor local: $replicas replicas behind HAProxy ($balance): send requests to http://127.0.0.1:$port/v1"
for i in $(seq 1 "$replicas"); do
  echo "rotor local: replica r$i http://127.0.0.1:${ports[$((i - 1))]} pid ${pids[$((i - 1))]} log $dir/r$i.log"
done
echo "rotor local: HAProxy pid $haproxy_pid stats http://127.0.0.1:$port/haproxy-stats"
echo "rotor local: ready (Ctrl-C or SIGTERM stops everything)"

# `wait` returns early for a trapped signal; then the trap stops everything.
wait "$haproxy_pid" || true
echo "rotor local: HAProxy exited" >&2
cat "$dir/haproxy.log" >&2
stop 1
