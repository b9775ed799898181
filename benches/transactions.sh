#!/usr/bin/env bash
# Transactional producer throughput (100 ms and 1 s transactions) against
# the idempotent producer's, and commit latency, with confluent-kafka
# against release-built brokers started here (benches/transactions.py
# says how; its last line is a machine-readable summary).
#
#   cargo build --release
#   scripts/python-venv                       # once: the Python clients
#   benches/transactions.sh [--rounds 5] [--duration 5] [--cluster]
#
# Every argument goes to benches/transactions.py (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
strom=target/release/strom
[ -x "$strom" ] || { echo "transactions: $strom missing: run cargo build --release" >&2; exit 2; }
venv=target/test-venv/bin
[ -x "$venv/python3" ] || { echo "transactions: $venv/python3 missing: run scripts/python-venv" >&2; exit 2; }
exec "$venv/python3" benches/transactions.py --strom "$strom" "$@"
