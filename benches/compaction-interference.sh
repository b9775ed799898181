#!/usr/bin/env bash
# Produce latency on one topic while the cleaner compacts another, against
# the same without cleaning, on one broker (`--cores 1`, pinned to CPU 0;
# strom-loadgen on CPU 1). Each round:
#   1. a compacted topic `cold` (min.compaction.lag.ms high: nothing
#      cleanable yet) is filled with COLD_BYTES of 1 KiB records over
#      1,024 keys (strom-loadgen, KEY_ROUND_ROBIN);
#   2. `hot` (delete policy) takes RATE records/s of 1 KiB, acks=all, for
#      WINDOW seconds: the baseline;
#   3. cold's min.compaction.lag.ms drops to 0 (the cleaner starts on it)
#      and hot takes the same load again: the figures while cleaning.
# Prints hot's publish p50/p99 for both windows and the cleanings' times
# from the broker's log.
#
#   cargo build --release --bins
#   benches/compaction-interference.sh [ROUNDS]
#
# Environment: RATE (records/s, 50000), WINDOW (s, 8), COLD_SECONDS (s of
# max-rate fill, 4), DIR (target/compaction-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
rate="${RATE:-50000}"
window="${WINDOW:-8}"
cold_seconds="${COLD_SECONDS:-4}"
dir="${DIR:-target/compaction-bench}"
strom=target/release/strom
loadgen=target/release/strom-loadgen
for bin in "$strom" "$loadgen"; do
  [ -x "$bin" ] || { echo "compaction-interference: $bin missing: run cargo build --release --bins" >&2; exit 2; }
done
port=19510
admin=19511
bootstrap="127.0.0.1:$port"

publish() { # report.json -> "p50 p99" of publish latency, ms
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); p=r["publish_latency"]["percentiles_ms"]; print(p["p50"], p["p99"])' "$1"
}

for round in $(seq 1 "$rounds"); do
  rm -rf "$dir"; mkdir -p "$dir"
  taskset -c 0 "$strom" start --data-dir "$dir/data" --cores 1 --listen "$bootstrap" \
    --admin-listen "127.0.0.1:$admin" --set log.cleaner.backoff.ms=500 > "$dir/broker.log" 2>&1 &
  broker=$!
  trap 'kill $broker 2>/dev/null || true' EXIT
  for _ in $(seq 1 120); do curl -sf "127.0.0.1:$admin/ready" > /dev/null && break; sleep 0.25; done
  "$strom" topic create cold -b "$bootstrap" --partitions 1 --replication-factor 1 \
    --config cleanup.policy=compact --config min.compaction.lag.ms=3600000 \
    --config segment.bytes=67108864 > /dev/null
  "$strom" topic create hot -b "$bootstrap" --partitions 1 --replication-factor 1 > /dev/null
  taskset -c 1 "$loadgen" produce --bootstrap "$bootstrap" --topic cold --message-size 1024 \
    --key-distributor KEY_ROUND_ROBIN --rate 0 --duration "$cold_seconds" --warmup 0 \
    --acks 1 --linger-ms 5 --json "$dir/cold.json" > /dev/null 2>&1
  hot() {
    taskset -c 1 "$loadgen" produce --bootstrap "$bootstrap" --topic hot --message-size 1024 \
      --rate "$rate" --duration "$window" --warmup 1 --acks all --linger-ms 1 \
      --json "$dir/$1.json" > /dev/null 2>&1
  }
  hot quiet
  start_ms=$(date +%s%3N)
  "$strom" topic alter cold -b "$bootstrap" --config min.compaction.lag.ms=0 > /dev/null
  hot cleaning
  end_ms=$(date +%s%3N)
  read -r quiet_p50 quiet_p99 <<< "$(publish "$dir/quiet.json")"
  read -r clean_p50 clean_p99 <<< "$(publish "$dir/cleaning.json")"
  cold_mb=$(du -sm "$dir/data/cold-0" | cut -f1)
  cleaned=$(grep -c "log cleaned" "$dir/broker.log" || true)
  echo "round $round: hot publish p50/p99 ms: quiet $quiet_p50/$quiet_p99, while cleaning $clean_p50/$clean_p99; cleanings $cleaned in the $(( (end_ms - start_ms) / 1000 )) s window, cold now ${cold_mb} MB"
  grep "log cleaned" "$dir/broker.log" | sed 's/^/  /' | cut -c1-400
  kill "$broker"; wait "$broker" 2>/dev/null || true
  trap - EXIT
done
