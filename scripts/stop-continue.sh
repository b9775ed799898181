#!/usr/bin/env bash
# Stops a broker under produce load again and again and shows whether it
# answers once continued: each cycle stops it (SIGSTOP) for 150 ms, then lets
# it run 1.35 s. A run whose publish max passes 1 s had the broker asleep
# with work to do (the glommio park that protocol::watchdog bounds; only the
# next SIGCONT would end it otherwise).
#
# usage: scripts/stop-continue.sh [BIN_DIR] [RUNS] [CYCLES]
#   BIN_DIR  holds strom and strom-loadgen (default target/release)
set -euo pipefail
bin=${1:-target/release}
runs=${2:-3}
cycles=${3:-20}
for tool in "$bin/strom" "$bin/strom-loadgen"; do
  [ -x "$tool" ] || { echo "missing $tool: cargo build --release" >&2; exit 2; }
done
for run in $(seq 1 "$runs"); do
  dir=$(mktemp -d)
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$bin/strom" start --cores 1 --listen "127.0.0.1:$port" --admin-listen off \
    --data-dir "$dir/data" >/dev/null 2>"$dir/strom.log" &
  broker=$!
  for _ in $(seq 1 300); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.02; done
  timeout 300 "$bin/strom-loadgen" produce --bootstrap "127.0.0.1:$port" --partitions 4 \
    --message-size 100 --rate 20000 --duration $((cycles * 3 / 2 + 3)) --warmup 0 \
    --linger-ms 0 --batch-size 1048576 --in-flight 2 --acks all --cores 1 \
    --json "$dir/report.json" >/dev/null 2>"$dir/loadgen.log" &
  loadgen=$!
  for _ in $(seq 1 1500); do ls "$dir/data" 2>/dev/null | grep -q loadgen- && break; sleep 0.02; done
  sleep 0.5
  for _ in $(seq 1 "$cycles"); do
    kill -STOP "$broker"; sleep 0.15; kill -CONT "$broker"; sleep 1.35
  done
  wait "$loadgen" || true
  python3 - "$dir/report.json" "$run" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
worst = r["publish_latency"]["max_ms"]
print(f"run {sys.argv[2]}: publish max {worst:.0f} ms, errors {r['errors'] or 'none'}",
      "(asleep with work to do)" if worst > 1000 else "")
PY
  kill "$broker"; wait "$broker" 2>/dev/null || true
  rm -rf "$dir"
done
