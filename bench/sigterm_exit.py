"""SIGTERM → process exit, every run terminal or released, no MCP server orphaned: < 20 s.

Each trial starts a real ``python -m bot`` worker (``bench/_workers.py``) with a stdio MCP
server configured (``mcp-server-time``, which the worker starts as a child process),
starts ``--runs`` runs through @mentions and waits until each one's model stream is open
(llmock streams two chunks and then stalls for a minute). Then it sends SIGTERM and
measures, from the signal, how long the process takes to exit. After the exit it checks:

- the exit status is 0;
- every run of the trial is terminal in the database, or has no owner (released);
- every MCP server process the worker had started is gone (not running, not a zombie).

``AUTO_RESUME=none``, so the next trial's worker does not resume the runs this one
interrupted. Usage: ``.venv/bin/python -m bench.sigterm_exit [--trials 3] [--runs 10]``
"""

from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmock.scenarios import Reply, StreamFault

from agent_core import RunState
from bench._llmock import LONG_TEXT
from bench._report import report
from bench._setup import bench_main, parser
from bench._stats import Row, machine_line, print_table, revision_line
from bench._workers import alive, children, run_rows, workers
from tests.system.workers import until

if TYPE_CHECKING:
    from bench._workers import Workers

TARGET_S = 20.0
STALL_S = 60.0
MCP_SERVER = {"command": sys.executable, "args": ["-m", "mcp_server_time"]}


@dataclass(frozen=True)
class Trial:
    exit_s: float
    status: int
    runs: int
    not_released: int
    mcp_servers: int
    mcp_orphaned: int


async def one_trial(w: Workers, index: int, runs: int) -> Trial:
    config = w.dir / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"time": MCP_SERVER}}))
    before = set(run_rows(w.database))
    w.llm.state.journal.clear()
    (worker,) = await w.cluster.start(f"w{index}", MCP_CONFIG=str(config), AUTO_RESUME="none")
    assert worker.process is not None
    for i in range(runs):
        await w.cluster.mention(worker, f"trial {index} task {i}: write a long answer")
    journal = w.llm.state.journal
    await until(lambda: journal.in_flight >= runs, what=f"{runs} model streams open")
    servers = [pid for pid, cmd in children(worker.process.pid) if "mcp_server_time" in cmd]
    t0 = time.monotonic()
    worker.process.send_signal(signal.SIGTERM)
    status = await worker.process.wait()
    exit_s = time.monotonic() - t0
    rows = {k: v for k, v in run_rows(w.database).items() if k not in before}
    not_released = sum(
        not RunState(state).is_terminal and owner is not None for state, owner in rows.values()
    )
    return Trial(
        exit_s=exit_s,
        status=status,
        runs=len(rows),
        not_released=not_released,
        mcp_servers=len(servers),
        mcp_orphaned=sum(alive(pid) for pid in servers),
    )


async def measure(trials: int, runs: int) -> bool:
    async with workers() as w:
        w.llm.state.scenarios.add(
            Reply(text=LONG_TEXT, times=None),
            StreamFault("stall", after_chunks=2, stall_seconds=STALL_S, times=None),
        )
        results = [await one_trial(w, i, runs) for i in range(trials)]
    wrong = sum(
        t.status != 0 or t.not_released or t.mcp_orphaned or t.runs != runs or not t.mcp_servers
        for t in results
    )
    row = Row(
        "SIGTERM → process exited",
        [t.exit_s for t in results],
        "s",
        TARGET_S,
        judged="max",
        target_id="sigterm_exit",
    )
    print_table(
        "sigterm_exit: SIGTERM → exit, runs terminal or released, no MCP server orphaned",
        [row],
        [
            f"per trial: {runs} runs streaming (stalled) and 1 stdio MCP server; exit status "
            f"{sorted({t.status for t in results})}; runs seen {[t.runs for t in results]}; "
            f"runs neither terminal nor released {sum(t.not_released for t in results)}; "
            f"MCP server processes {sum(t.mcp_servers for t in results)}, still alive after "
            f"exit {sum(t.mcp_orphaned for t in results)}",
            f"trials failing a check: {wrong}",
            "worker: real python -m bot (HTTP, SQLite file, LEASE_TTL 3 s); fake Slack and "
            "llmock in this process",
            machine_line(),
            revision_line(),
        ],
    )
    checks = "trials with exit ≠ 0, a run not terminal or released, or an MCP server left"
    report("sigterm_exit", checks, str(wrong), "PASS" if wrong == 0 else "MISS")
    return row.verdict == "PASS" and wrong == 0


def main() -> None:
    p = parser(__doc__.splitlines()[0] if __doc__ else "sigterm_exit")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--runs", type=int, default=10)
    args = p.parse_args()
    bench_main(args, lambda: measure(args.trials, args.runs))


if __name__ == "__main__":
    main()
