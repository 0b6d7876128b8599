"""A worker whose event loop is busy takes no new runs (bot/observe/loop_load.py).

The unit tests give :class:`LoopLoad` its measurements; the end-to-end test makes the real
app's loop late for real (a callback that holds it), sends a mention, and sees the run
wait in the queue ("Queued") until the loop is calm, then start in that same message.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from bot.observe.loop_load import SMOOTHING, LoopLoad
from tests.bot.harness import SHORT_TEXT, block_text, is_final, run_id_of
from tests.system.workers import until

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory


def busy(load: LoopLoad) -> bool:
    """Read afresh each time (an ``assert load.busy`` would fix its type for mypy)."""
    return load.busy


def test_one_long_pause_is_not_busy_a_late_loop_is() -> None:
    load = LoopLoad(busy_lag_s=0.01)
    load.sample(0.5)  # one half-second pause: a full collection, say
    assert not load.busy
    for _ in range(SMOOTHING):
        load.sample(0.03)
    assert load.busy


def test_calm_again_only_well_under_the_limit_and_said_once() -> None:
    calmed: list[float] = []
    load = LoopLoad(busy_lag_s=0.01, on_calm=lambda: calmed.append(load.lag_s))
    for _ in range(4 * SMOOTHING):
        load.sample(0.03)
    assert busy(load)
    for _ in range(10 * SMOOTHING):
        load.sample(0.008)  # under the limit, not under half of it: still busy
    assert 0.0079 < load.lag_s < 0.01
    assert busy(load) and calmed == []
    for _ in range(4 * SMOOTHING):
        load.sample(0.0)
    assert not busy(load)
    assert len(calmed) == 1 and calmed[0] < 0.005


async def test_a_busy_worker_queues_a_mention_and_starts_it_once_calm(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(BUSY_LOOP_LAG_MS=10)
    assert bot.app.ctx is not None
    supervisor = bot.app.ctx.supervisor
    assert supervisor.has_room()

    calm = asyncio.Event()

    async def hold_the_loop() -> None:
        # Every turn of this task keeps the loop for 30 ms: everything else runs late.
        while not calm.is_set():
            time.sleep(0.03)  # noqa: ASYNC251  # wait-ok: a busy loop is what is tested
            await asyncio.sleep(0)

    holding = asyncio.create_task(hold_the_loop())
    try:
        await until(lambda: not supervisor.has_room(), what="the worker to say it is busy")
        llm.reply(SHORT_TEXT)
        _, message = await bot.mention("a task for a busy worker")
        assert "Queued: 0 ahead" in block_text(message)
        assert bot.live_run(message) is None
    finally:
        calm.set()
        await holding

    # Calm again: the run starts in the message it waited in, and finishes.
    done = await bot.final(message)
    assert is_final(done) and "Finished" in block_text(done)
    store = bot.app.ctx.store
    record = await store.get_run(run_id_of(message))
    assert record is not None and record.status_ts == message.ts
