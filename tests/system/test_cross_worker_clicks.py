"""A Stop or Abort click handled by one worker takes effect in the worker that owns the run.

Slack hands each click to any of the app's connections, so with several workers the
click usually lands where the run is not (docs/operations.md, Several workers). Worker ``b``
commits the request; worker ``a``, the owner, must see it and end its run: Stop after a
final turn, Abort by closing the model's stream at once.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from agent_core import RunState
from tests.agent_core.helpers import offered_tools
from tests.bot.harness import ACTION_ABORT, ACTION_STOP, block_text, run_id_of, stalled_answer
from tests.fakes.slack_workspace import DEFAULT_USER
from tests.system.workers import WAIT_S, until

if TYPE_CHECKING:
    from llmock.journal import Journal, RequestRecord
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.system.workers import Cluster

pytestmark = pytest.mark.slow

STOP_STALL_S = 2.0
"""Long enough for the click to land mid-stream, short enough for the step to finish."""
ABORT_STALL_S = 20.0


async def model_requests(journal: Journal, count: int) -> list[RequestRecord]:
    """The first ``count`` model requests, once llmock has finished serving them."""
    return await until(
        lambda: records if len(records := journal.records()) >= count else None,
        what=f"{count} finished model request(s)",
    )


async def test_stop_clicked_on_another_worker_ends_with_the_owners_final_turn(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    a, b = await cluster.start("a", "b")
    llm.add(*stalled_answer(STOP_STALL_S))
    llm.reply("Stopped early: nothing was checked yet.")
    _, status = await cluster.mention(a, "check the time")
    run_id = run_id_of(status)
    await cluster.slack.wait_for_call("chat.startStream", timeout=WAIT_S)  # now stalled

    assert await b.click(cluster.current(status), ACTION_STOP) == 200
    committed_at = time.monotonic()  # b acknowledges only after the commit
    final = await cluster.final(status)

    text = block_text(final)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in text
    assert "Stopped early: nothing was checked yet." in text
    streamed, final_turn = await model_requests(journal, 2)
    assert committed_at < streamed.ended_at  # the click landed while the model stalled...
    assert streamed.completed  # ...and the step in flight was let finish
    assert offered_tools(final_turn) == ["final_report"]
    tool_notes = [m["content"] for m in final_turn.body["messages"] if m["role"] == "tool"]
    assert tool_notes == ["not run: the user asked to stop"]
    assert len(journal.records()) == 2 and journal.in_flight == 0
    # b committed it, a (the owner) honoured it and wrote the ending.
    assert b.logged("click.handled", run_id=run_id, local=False, verdict="stop")
    assert a.logged("stop.delivered", run_id=run_id, kind="stop")
    record = await store.get_run(run_id)
    assert record is not None
    assert (record.state, record.owner, record.stopped_by) == (
        RunState.USERINTERLUDE,
        "a",
        DEFAULT_USER,
    )


async def test_abort_clicked_on_another_worker_closes_the_owners_model_stream(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    a, b = await cluster.start("a", "b")
    llm.add(*stalled_answer(ABORT_STALL_S))
    _, status = await cluster.mention(a, "write a lot")
    run_id = run_id_of(status)
    await cluster.slack.wait_for_call("chat.startStream", timeout=WAIT_S)

    assert await b.click(cluster.current(status), ACTION_ABORT) == 200
    committed_at = time.monotonic()
    final = await cluster.final(status)

    assert f"User interlude: aborted by <@{DEFAULT_USER}>" in block_text(final)
    (record,) = await model_requests(journal, 1)
    assert not record.completed  # llmock saw the client close the stream...
    assert record.ended_at - committed_at < ABORT_STALL_S / 2  # ...long before the stall ended
    assert journal.in_flight == 0  # and no other model request was made
    assert b.logged("click.handled", run_id=run_id, local=False, verdict="abort")
    assert a.logged("stop.delivered", run_id=run_id, kind="abort")
    stored = await store.get_run(run_id)
    assert stored is not None
    assert (stored.state, stored.owner) == (RunState.USERINTERLUDE, "a")
