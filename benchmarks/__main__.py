"""``python -m benchmarks NAME [--seeds N] [--report-only] [--set key=value]``; ``python -m benchmarks`` lists them."""

from __future__ import annotations

import sys

from benchmarks.harness import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
