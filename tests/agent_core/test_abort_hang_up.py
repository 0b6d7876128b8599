"""Abort hangs up the model's connection before anything else (the Abort → close target).

A person's Abort (or a shutdown) must reach the model server as a closed connection at
once, not after the event loop has found time to unwind the run's task: on a busy
worker that unwinding waits behind every other ready callback. So each test requests
the stop from another task and then, without giving the event loop a single turn,
reads llmock's journal (a blocking read, on purpose: the loop cannot run while it
waits). The request is there, ended early, only if the stop itself hung up; the run's
task has not even started unwinding.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest
from llmock.scenarios import Reply, StreamFault

from agent_core.models.api import ModelAPI, build_model
from agent_core.run.compaction import Compaction, CompactionStopped
from agent_core.values.events import TextDelta
from agent_core.values.outcomes import ExitCode
from agent_core.values.stop import StopReason, StopSource
from tests.agent_core.helpers import FIRST_TEXT_CHUNK, EventLog, base_url_for

if TYPE_CHECKING:
    from llmock.journal import RequestRecord
    from llmock.pytest_plugin import LLMock

    from tests.agent_core.helpers import AgentFactory

pytestmark = pytest.mark.parametrize("model_api", list(ModelAPI))

STALL_S = 30.0


def stall_after_first_text(api: ModelAPI) -> StreamFault:
    return StreamFault("stall", after_chunks=FIRST_TEXT_CHUNK[api] + 1, stall_seconds=STALL_S)


def cut_short(llm: LLMock) -> RequestRecord:
    """The one request, as llmock saw it end; read while the event loop is held (the
    journal's read blocks until no request is in flight, or two seconds)."""
    (record,) = llm.requests
    return record


@pytest.mark.parametrize("reason", [StopReason.ABORT, StopReason.SHUTDOWN])
async def test_a_cancelling_stop_hangs_up_before_the_run_unwinds(
    llm: LLMock, make_agent: AgentFactory, model_api: ModelAPI, reason: StopReason
) -> None:
    llm.add(Reply(text="A long answer " * 100), stall_after_first_text(model_api))
    run = make_agent().new_run("write a long answer")
    events = EventLog(run)
    task = asyncio.create_task(run.run())
    await events.first(TextDelta)

    run.request_stop(reason, "U2", source=StopSource.BUTTON)
    record = cut_short(llm)  # no await since the request: the loop has not turned

    assert not record.completed
    assert record.duration < STALL_S
    assert not task.done()  # the run has not unwound yet: the stop itself hung up
    result = await task
    expected = ExitCode.USER_ABORT if reason is StopReason.ABORT else ExitCode.SHUTDOWN
    assert result.exit_code is expected


async def test_a_sub_agents_connection_is_hung_up_with_its_parents_abort(
    llm: LLMock, make_agent: AgentFactory, model_api: ModelAPI
) -> None:
    llm.add(Reply(text="A long answer " * 100), stall_after_first_text(model_api))
    parent = make_agent().new_run("delegate the essay")
    child = parent.child("write a long answer")
    events = EventLog(child)
    task = asyncio.create_task(child.run())
    await events.first(TextDelta)

    parent.request_stop(StopReason.ABORT, "U2")
    record = cut_short(llm)

    assert not record.completed
    assert record.duration < STALL_S
    assert (await task).exit_code is ExitCode.USER_ABORT


@pytest.mark.parametrize("reason", [StopReason.STOP, StopReason.ABORT])
async def test_a_stopped_compaction_hangs_up_its_summary_request(
    llm: LLMock, model_api: ModelAPI, reason: StopReason
) -> None:
    llm.add(Reply(text="A long summary " * 100), stall_after_first_text(model_api))
    model = build_model(
        model_api, model="test-model", api_key="test-key", base_url=base_url_for(llm, model_api)
    )
    streaming = asyncio.Event()
    compaction = Compaction(
        model,
        [{"role": "user", "content": "a long thread"}],
        compaction_id="run-2",
        on_text=lambda _text: streaming.set(),
    )
    try:
        task = asyncio.create_task(compaction.run())
        async with asyncio.timeout(10):
            await streaming.wait()

        compaction.request_stop(reason, "U2")
        record = cut_short(llm)

        assert not record.completed
        assert record.duration < STALL_S
        assert isinstance(await task, CompactionStopped)
    finally:
        await model.aclose()
