"""``kill -9`` of the worker that took a click, right after it committed the stop request:
the stop still reaches the owner (docs/operations.md: no stop request lost to ``kill -9``
of any process). The request is in the database, and the database is the truth.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import aiohttp
import pytest

from agent_core import RunState
from tests.agent_core.helpers import offered_tools
from tests.bot.harness import ACTION_STOP, block_text, run_id_of, stalled_answer
from tests.fakes.slack_workspace import DEFAULT_USER
from tests.system.workers import WAIT_S, until_async

if TYPE_CHECKING:
    from llmock.journal import Journal
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.system.workers import Cluster

pytestmark = pytest.mark.slow

STALL_S = 2.0


async def test_a_stop_committed_by_a_worker_killed_at_once_still_takes_effect(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    a, b = await cluster.start("a", "b")
    llm.add(*stalled_answer(STALL_S))
    llm.reply("Stopped: the time was not checked.")
    _, status = await cluster.mention(a, "check the time")
    run_id = run_id_of(status)
    await cluster.slack.wait_for_call("chat.startStream", timeout=WAIT_S)

    click = asyncio.create_task(b.click(cluster.current(status), ACTION_STOP))
    (request,) = await until_async(
        lambda: store.stop_requests_for(run_id), what="b to commit the stop", every=0.005
    )
    assert await b.kill() == -9
    with contextlib.suppress(aiohttp.ClientError):
        await click  # b may have died before or after answering: either is fine
    final = await cluster.final(status)

    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in block_text(final)
    assert (request.kind, request.requested_by) == ("stop", DEFAULT_USER)
    assert a.logged("stop.delivered", run_id=run_id, request_id=request.id)
    records = journal.records()
    assert len(records) == 2 and offered_tools(records[-1]) == ["final_report"]
    record = await store.get_run(run_id)
    assert record is not None
    assert (record.state, record.owner, record.stopped_by) == (
        RunState.USERINTERLUDE,
        "a",
        DEFAULT_USER,
    )

    async def handled() -> bool:
        return [r.status for r in await store.stop_requests_for(run_id)] == ["handled"]

    await until_async(handled, what="a to mark the request handled once its run ended")
