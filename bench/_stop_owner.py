"""The owning worker in ``bench.stop_propagation``: a real
:class:`bot.workers.stop_watch.StopWatcher`
over the shared database, holding ``--runs`` stand-in live runs. For every stop request it
delivers it prints ``<run id> <time.monotonic()>`` (CLOCK_MONOTONIC is one clock for every
process on the machine, so the parent can subtract its own commit times)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field

from agent_core import StopReason, configure_logging
from agent_core.stores.factory import open_store
from bot.workers.stop_watch import StopWatcher


@dataclass
class _Run:
    id: str

    def request_stop(self, reason: StopReason, requested_by: str, *, source: str) -> bool:
        print(self.id, repr(time.monotonic()), flush=True)
        return True


@dataclass
class _Live:
    run: _Run


@dataclass
class _Supervisor:
    """Just what StopWatcher reads: the live runs, by id (none has sub-agents)."""

    runs: dict[str, _Live] = field(default_factory=dict)

    @property
    def live_runs(self) -> list[_Live]:
        return list(self.runs.values())

    def reachable(self, run_id: str) -> _Live | None:
        return self.runs.get(run_id)

    def live_children(self, run_id: str) -> list[_Run]:
        return []


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("database_url")
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--poll", type=float, default=0.25)
    args = parser.parse_args()
    configure_logging("console", "WARNING")  # stdout carries the measurements only
    store = await open_store(args.database_url)
    supervisor = _Supervisor({f"bench-{i}": _Live(_Run(f"bench-{i}")) for i in range(args.runs)})
    # No guidance is committed here, so the watcher never reaches Slack (no workspaces).
    watcher = StopWatcher(store, supervisor, None, poll_s=args.poll)  # type: ignore[arg-type]
    await watcher.start()
    print("ready", flush=True)
    try:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until EOF
    finally:
        await watcher.close()
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
