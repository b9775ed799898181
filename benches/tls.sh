#!/usr/bin/env bash
# TLS against plaintext on the client listener: producer and consumer
# throughput and broker CPU per GB, with confluent-kafka against a
# release-built broker started here per case (benches/tls.py says how;
# its last line is a machine-readable summary).
#
#   cargo build --release
#   scripts/python-venv                       # once: the Python clients
#   benches/tls.sh [--rounds 5] [--duration 5]
#
# Every argument goes to benches/tls.py (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
strom=target/release/strom
[ -x "$strom" ] || { echo "tls: $strom missing: run cargo build --release" >&2; exit 2; }
venv=target/test-venv/bin
[ -x "$venv/python3" ] || { echo "tls: $venv/python3 missing: run scripts/python-venv" >&2; exit 2; }
exec "$venv/python3" benches/tls.py --strom "$strom" "$@"
