"""What every client check script shares: failing with a message on
stderr and a non-zero exit, and checking a condition."""

import sys


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)
