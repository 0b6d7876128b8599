"""Stop requests, guidance and mentions acknowledged, then the worker killed: none lost.

Each trial starts a real ``python -m bot`` worker A (``bench/_workers.py``) with
``--runs`` runs streaming (stalled). Then, all at once through A: a Stop click on two
runs, a reply (guidance) in the threads of two others, and two new @mentions. As soon as
A has acknowledged every one of them (HTTP 200), A is killed with SIGKILL, and a fresh
worker B is started on the same database. Counted as lost:

- a Stop whose stop request is not in the database (``stop_requests``);
- a reply that is not in the ``guidance`` table;
- a mention for which no run has started in its thread (none has a status message)
  once B has been ready for the lease TTL + 10 s (B takes over what A left). Such a
  mention may still be picked up later (by the next worker to start, say), but the
  person who was told "accepted" has seen nothing happen by then.

The acknowledgement promises the commit, so the kill right after it is the hardest case.
A database blip is not part of this benchmark: the system tests cover it
(``tests/system/test_postgres_listener_loss.py`` and the store fault tests).

Usage: ``.venv/bin/python -m bench.no_loss [--trials 3] [--runs 4]``
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmock.scenarios import Reply, StreamFault

from bench._llmock import LONG_TEXT
from bench._report import report
from bench._setup import bench_main, parser
from bench._stats import Figure, machine_line, print_figures, revision_line
from bench._workers import LEASE_TTL_S, mention, workers
from bot.views.status import ACTION_STOP
from tests.bot.harness import run_id_of
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import next_ts
from tests.system.workers import until

if TYPE_CHECKING:
    from pathlib import Path

    from bench._workers import Workers
    from tests.fakes.slack_messages import Message
    from tests.system.workers import WorkerProcess

STALL_S = 60.0
TAKEOVER_S = LEASE_TTL_S + 10.0


@dataclass(frozen=True)
class Trial:
    stops: int
    stops_lost: int
    replies: int
    replies_lost: int
    mentions: int
    mentions_lost: int
    not_acked: int


async def one_trial(w: Workers, index: int, runs: int) -> Trial:
    journal = w.llm.state.journal
    journal.clear()
    (first,) = await w.cluster.start(f"a{index}")
    statuses = [
        await mention(w, first, f"trial {index} run {i}", f"CL{index}R{i:03d}") for i in range(runs)
    ]
    await until(lambda: journal.in_flight >= runs, what=f"{runs} model streams open")
    stopped = statuses[:2]
    guided = statuses[2:4]
    replies = {f"guidance {index}-{i}: please be brief": s for i, s in enumerate(guided)}
    mentions = [(f"CL{index}M{i:03d}", next_ts()) for i in range(2)]
    codes = await asyncio.gather(
        *(first.click(w.cluster.current(s), ACTION_STOP) for s in stopped),
        *(_reply(w, first, text, s) for text, s in replies.items()),
        *(_mention(w, first, channel, ts, index) for channel, ts in mentions),
    )
    assert first.process is not None
    first.process.send_signal(signal.SIGKILL)
    await first.process.wait()
    (second,) = await w.cluster.start(f"b{index}")

    stop_rows, guidance_texts = _stored(w.database)
    stops_lost = sum((run_id_of(s), "stop") not in stop_rows for s in stopped)
    replies_lost = sum(text not in guidance_texts for text in replies)

    def missing() -> list[tuple[str, str]]:
        threads = _threads(w.database)
        return [m for m in mentions if m not in threads]

    with contextlib.suppress(TimeoutError):
        await until(lambda: not missing(), what="a run for each mention", timeout=TAKEOVER_S)
    await second.stop()
    return Trial(
        stops=len(stopped),
        stops_lost=stops_lost,
        replies=len(replies),
        replies_lost=replies_lost,
        mentions=len(mentions),
        mentions_lost=len(missing()),
        not_acked=sum(code != 200 for code in codes),
    )


async def _reply(w: Workers, worker: WorkerProcess, text: str, status: Message) -> int:
    assert status.thread_ts is not None
    envelope = slack_requests.thread_reply(text, thread_ts=status.thread_ts, channel=status.channel)
    event = envelope["event"]
    w.cluster.slack.seed_message(
        status.channel, text, user=event["user"], ts=event["ts"], thread_ts=status.thread_ts
    )
    return await worker.event(envelope)


async def _mention(w: Workers, worker: WorkerProcess, channel: str, ts: str, index: int) -> int:
    slack = w.cluster.slack
    text = f"<@{slack.workspace.bot_user_id}> trial {index}: a new task"
    envelope = slack_requests.app_mention(text, channel=channel, ts=ts)
    slack.seed_message(channel, text, user=envelope["event"]["user"], ts=ts)
    return await worker.event(envelope)


def _stored(database: Path) -> tuple[set[tuple[str, str]], set[str]]:
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        stops = {(str(r), str(k)) for r, k in db.execute("SELECT run_id, kind FROM stop_requests")}
        texts = {str(t) for (t,) in db.execute("SELECT text FROM guidance")}
    return stops, texts


def _threads(database: Path) -> set[tuple[str, str]]:
    """The threads with a run that has started: it has a status message in Slack (a row
    alone is not enough: an accepted run's row is written before the ack)."""
    sql = "SELECT channel, thread_ts FROM runs WHERE status_ts IS NOT NULL"
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        return {(str(c), str(t)) for c, t in db.execute(sql)}


async def measure(trials: int, runs: int) -> bool:
    async with workers() as w:
        w.llm.state.scenarios.add(
            Reply(text=LONG_TEXT, times=None),
            StreamFault("stall", after_chunks=2, stall_seconds=STALL_S, times=None),
        )
        results = [await one_trial(w, i, runs) for i in range(trials)]
    stops = sum(t.stops for t in results)
    replies = sum(t.replies for t in results)
    mentions = sum(t.mentions for t in results)
    lost = {
        "stop requests": sum(t.stops_lost for t in results),
        "guidance": sum(t.replies_lost for t in results),
        "mentions": sum(t.mentions_lost for t in results),
    }
    total = sum(lost.values())
    not_acked = sum(t.not_acked for t in results)
    figures = [
        Figure(
            "acknowledged, then lost to kill -9",
            float(total),
            "items",
            trials,
            limit=0.5,  # a count: < 0.5 means none
            target_id="no_loss",
            target_text="0",
        ),
        *(Figure(f"lost: {kind}", float(n), "items", trials) for kind, n in lost.items()),
        # (mentions: no run in the thread within the lease TTL + 10 s of B being ready)
    ]
    print_figures(
        "no_loss: acknowledged stop requests, guidance and mentions, then kill -9",
        figures,
        [
            f"acknowledged by the killed worker: {stops} Stops, {replies} replies, {mentions} "
            f"mentions ({not_acked} not acknowledged with 200, not counted as promised)",
            f"per trial: {runs} runs streaming (stalled) on worker A; all of them at once; "
            "SIGKILL as soon as every acknowledgement is in; worker B started on the same "
            f"database; mentions given {TAKEOVER_S:g} s after B is ready",
            "covers kill -9 only; a database blip is covered by the system tests",
            "workers: real python -m bot (HTTP, SQLite file, LEASE_TTL 3 s); fake Slack and "
            "llmock in this process",
            machine_line(),
            revision_line(),
        ],
    )
    report(
        "no_loss",
        "items not acknowledged with 200 (nothing promised)",
        str(not_acked),
        "PASS" if not_acked == 0 else "MISS",
    )
    return figures[0].verdict == "PASS" and not_acked == 0


def main() -> None:
    p = parser(__doc__.splitlines()[0] if __doc__ else "no_loss")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--runs", type=int, default=4)
    args = p.parse_args()
    bench_main(args, lambda: measure(args.trials, args.runs))


if __name__ == "__main__":
    main()
