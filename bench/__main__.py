"""Run every benchmark, one process each: ``.venv/bin/python -m bench [name ...]``.

Each prints its own table; this prints a one-line summary per benchmark at the end.
Exit status 0 only if every benchmark that judges its figures passed.
"""

from __future__ import annotations

import subprocess
import sys
import time

BENCHMARKS = (
    "abort_close",
    "stop_final_turn",
    "abort_click_close",
    "click_ack",
    "memory",
    "stop_propagation",
    "mcp_abort_cancel",
    "queue_share",
    "chunk_cpu",
)
CHILD_LIMIT_S = 150.0
OUTCOME = {0: "all targets met", 1: "MISS (see its table)", 2: "gave up (time limit)"}


def main() -> int:
    names = sys.argv[1:] or list(BENCHMARKS)
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
        return 2
    summary: list[str] = []
    worst = 0
    for name in names:
        started = time.monotonic()
        try:
            code = subprocess.run(
                [sys.executable, "-m", f"bench.{name}"], timeout=CHILD_LIMIT_S, check=False
            ).returncode
        except subprocess.TimeoutExpired:
            code = 2
        worst = max(worst, code)
        took = time.monotonic() - started
        summary.append(f"{name:<18} {took:5.0f} s  {OUTCOME.get(code, f'failed ({code})')}")
    print("\n== summary ==")
    print("\n".join(summary))
    return 0 if worst == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
