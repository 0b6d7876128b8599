"""Stop, Abort and Shutdown at every point of a run (docs/stopping.md, Stop, Abort, Shutdown).

Each test triggers the request from the run's own progress events (a synchronous
listener), so the moment is exact and nothing sleeps. Where a stream must still be in
flight, llmock stalls it server-side; the journal then shows what the server saw.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import pytest
from llmock.scenarios import Reply, StreamFault, ToolCall

from agent_core.models.api import ModelAPI
from agent_core.tools.toolbox import tool
from agent_core.values.events import (
    Retrying,
    RunEvent,
    StopHonoured,
    StopRequested,
    TextDelta,
    ToolStarted,
)
from agent_core.values.outcomes import ExitCode, Outcome
from agent_core.values.stop import StopReason, StopSource
from tests.agent_core.helpers import (
    FIRST_TEXT_CHUNK,
    EventLog,
    offered_tools,
    system_messages,
    tool_results,
)

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from agent_core.run.loop import Run
    from tests.agent_core.helpers import AgentFactory

pytestmark = pytest.mark.parametrize("model_api", list(ModelAPI))  # every scenario, every API

LONG_TEXT = " ".join(f"word{i}" for i in range(40))


def on_first(run: Run, kind: type, action: object) -> None:
    """Call ``action()`` synchronously the first time ``run`` emits an event of ``kind``."""
    fired = False

    def listener(event: RunEvent) -> None:
        nonlocal fired
        if not fired and isinstance(event, kind):
            fired = True
            action()  # type: ignore[operator]

    run.events.add_listener(listener)


def stall_after(api: ModelAPI, pieces: int, seconds: float = 30.0) -> StreamFault:
    """Stall the next stream after ``pieces`` of its text, whatever the API's preamble."""
    return StreamFault("stall", after_chunks=FIRST_TEXT_CHUNK[api] + pieces, stall_seconds=seconds)


@tool
async def noop() -> str:
    """Do nothing."""
    return "nothing done"


async def test_stop_during_streaming_finishes_the_stream_then_takes_one_final_turn(
    llm: LLMock, make_agent: AgentFactory, model_api: ModelAPI
) -> None:
    ran: list[str] = []

    @tool
    def lookup(city: str) -> str:
        """Look up the weather."""
        ran.append(city)
        return "21C"

    llm.add(
        Reply(
            text="Checking the forecast now.", tool_calls=(ToolCall("lookup", {"city": "Oslo"}),)
        ),
        stall_after(model_api, 1, seconds=0.3),
    )
    llm.call_tool(
        "final_report",
        {
            "outcome": "finished",
            "evidence": "Nothing was looked up yet.",
            "artifacts": [],
            "handoff": "The requester decides whether to look it up.",
        },
    )
    run = make_agent([lookup]).new_run("Weather in Oslo?")
    on_first(
        run, TextDelta, lambda: run.request_stop(StopReason.STOP, "U1", source=StopSource.BUTTON)
    )
    result = await run.run()

    first, final = llm.requests
    assert first.completed and first.chunks_sent > 2  # the stream ran to its end
    assert ran == []  # tool calls that arrived with the stop are new work: not run
    assert offered_tools(final) == ["final_report"]
    assert "The user asked you to stop" in system_messages(final)[-1]
    assert result.outcome is Outcome.USERINTERLUDE
    assert result.exit_code is ExitCode.USER_STOP
    assert result.stop_reason is StopReason.STOP
    assert result.handoff.stopped_by == "U1"
    assert result.handoff.evidence == "Nothing was looked up yet."
    assert result.turns == 2
    assert result.process_status == 0
    t = result.timings
    assert t.stop_requested_at is not None and t.stop_honoured_at is not None
    assert t.stop_requested_at <= t.stop_honoured_at


async def test_stop_during_a_tool_lets_the_tool_finish_then_takes_the_final_turn(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    release = asyncio.Event()
    finished: list[bool] = []

    @tool
    async def build() -> str:
        """Run the build."""
        await release.wait()
        finished.append(True)
        return "build ok"

    llm.call_tool("build")
    llm.reply("Stopped after the build; it passed.")
    run = make_agent([build]).new_run("build it")
    events = EventLog(run)
    task = asyncio.create_task(run.run())
    await events.first(ToolStarted)
    assert run.request_stop(StopReason.STOP, "U1")
    await events.first(StopRequested)
    assert not task.done()
    release.set()
    result = await task

    assert finished == [True]
    final = llm.requests[-1]
    assert len(llm.requests) == 2
    assert offered_tools(final) == ["final_report"]
    assert tool_results(final) == ["build ok"]
    assert result.outcome is Outcome.USERINTERLUDE
    assert result.exit_code is ExitCode.USER_STOP
    assert result.handoff.evidence == "Stopped after the build; it passed."


async def test_stop_during_a_rate_limit_wait_ends_the_wait_at_once(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.call_tool("noop")
    run = make_agent([noop]).new_run("work")
    # Queued once the first answer is in, so the 429 hits the second request.
    on_first(run, ToolStarted, lambda: llm.rate_limit(retry_after=60))
    on_first(run, Retrying, lambda: run.request_stop(StopReason.STOP, "U1"))
    started = time.monotonic()
    result = await run.run()

    assert time.monotonic() - started < 30  # nowhere near the 60 s Retry-After
    statuses = [r.status for r in llm.requests]
    assert statuses == [200, 429, 200]
    assert offered_tools(llm.requests[-1]) == ["final_report"]
    assert result.outcome is Outcome.USERINTERLUDE
    assert result.exit_code is ExitCode.USER_STOP


async def test_stop_after_the_final_answer_adds_no_turn(
    llm: LLMock, make_agent: AgentFactory, model_api: ModelAPI
) -> None:
    llm.add(Reply(text="All done: the report is attached."), stall_after(model_api, 1, seconds=0.3))
    run = make_agent().new_run("summarise")
    on_first(run, TextDelta, lambda: run.request_stop(StopReason.STOP, "U1"))
    result = await run.run()

    assert len(llm.requests) == 1
    assert result.outcome is Outcome.FINISHED
    assert result.exit_code is ExitCode.FINAL_ANSWER
    assert result.final_text == "All done: the report is attached."
    assert result.stop_reason is StopReason.STOP  # requested, but never needed
    assert result.handoff.stopped_by is None


async def test_stop_before_the_first_step_never_calls_the_model(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    run = make_agent().new_run("anything")
    run.request_stop(StopReason.STOP, "U1")
    result = await run.run()

    assert llm.requests == []
    assert result.outcome is Outcome.USERINTERLUDE
    assert result.exit_code is ExitCode.USER_STOP
    assert result.turns == 0
    assert result.handoff.stopped_by == "U1"


async def test_abort_during_streaming_closes_the_connection(
    llm: LLMock, make_agent: AgentFactory, model_api: ModelAPI
) -> None:
    llm.add(Reply(text=LONG_TEXT), stall_after(model_api, 2))
    run = make_agent().new_run("write an essay")
    on_first(
        run, TextDelta, lambda: run.request_stop(StopReason.ABORT, "U2", source=StopSource.BUTTON)
    )
    result = await run.run()

    # The server notices the hang-up on its own thread, a moment after the client closed,
    # so its clock is no judge of "closed before reporting": bench/abort_close measures
    # that ordering and its latency. Here: the stream was abandoned mid-way.
    (record,) = llm.requests
    assert not record.completed  # the server saw the client hang up mid-stream...
    assert record.duration < 30  # ...long before the 30 s stall would have ended
    assert result.outcome is Outcome.USERINTERLUDE
    assert result.exit_code is ExitCode.USER_ABORT
    assert result.stop_reason is StopReason.ABORT
    assert result.handoff.stopped_by == "U2"
    assert result.process_status == 130
    assert "streaming" in result.handoff.evidence


async def test_abort_during_a_tool_cancels_the_tool_task(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    cancelled = asyncio.Event()

    @tool
    async def forever() -> str:
        """Never returns on its own."""
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "unreachable"

    llm.call_tool("forever")
    run = make_agent([forever]).new_run("hang")
    on_first(run, ToolStarted, lambda: run.request_stop(StopReason.ABORT, "U2"))
    result = await run.run()

    assert cancelled.is_set()
    assert len(llm.requests) == 1  # no final turn
    assert result.exit_code is ExitCode.USER_ABORT
    assert "running the tool forever" in result.handoff.evidence


async def test_abort_upgrades_a_pending_stop_and_cancels_the_final_turn(
    llm: LLMock, make_agent: AgentFactory, model_api: ModelAPI
) -> None:
    llm.call_tool("noop")
    run = make_agent([noop]).new_run("work")
    events = EventLog(run)

    def stop_and_script_the_final_turn() -> None:
        run.request_stop(StopReason.STOP, "U1")
        llm.add(Reply(text=LONG_TEXT), stall_after(model_api, 1))

    on_first(run, ToolStarted, stop_and_script_the_final_turn)
    final_text_seen = asyncio.Event()

    def abort_in_final_turn(event: RunEvent) -> None:
        if (
            isinstance(event, TextDelta)
            and run.control.honoured_at
            and not final_text_seen.is_set()
        ):
            final_text_seen.set()
            run.request_stop(StopReason.ABORT, "U1")

    run.events.add_listener(abort_in_final_turn)
    result = await run.run()

    assert [r.reason for r in run.control.history] == [StopReason.STOP, StopReason.ABORT]
    assert [e.reason for e in events.of(StopHonoured)] == [StopReason.STOP]
    final = llm.requests[-1]
    assert offered_tools(final) == ["final_report"]
    assert not final.completed  # the final turn's stream was closed by the abort
    assert result.exit_code is ExitCode.USER_ABORT
    assert result.stop_reason is StopReason.ABORT


async def test_a_repeated_stop_is_a_no_op(llm: LLMock, make_agent: AgentFactory) -> None:
    release = asyncio.Event()

    @tool
    async def slow() -> str:
        """Slow."""
        await release.wait()
        return "ok"

    llm.call_tool("slow")
    run = make_agent([slow]).new_run("work")
    events = EventLog(run)
    task = asyncio.create_task(run.run())
    await events.first(ToolStarted)
    assert run.request_stop(StopReason.STOP, "U1") is True
    assert run.request_stop(StopReason.STOP, "U3") is False
    release.set()
    result = await task

    assert len(events.of(StopRequested)) == 1
    assert len(llm.requests) == 2  # one step, one final turn
    assert result.handoff.stopped_by == "U1"


async def test_stop_never_downgrades_an_abort(make_agent: AgentFactory) -> None:
    run = make_agent().new_run("x")
    assert run.request_stop(StopReason.ABORT, "U1")
    assert not run.request_stop(StopReason.STOP, "U2")
    assert not run.request_stop(StopReason.SHUTDOWN, "system")
    assert run.control.reason is StopReason.ABORT


async def test_shutdown_cancels_and_leaves_a_resumable_checkpoint(
    llm: LLMock, make_agent: AgentFactory, model_api: ModelAPI
) -> None:
    from agent_core.stores.memory import MemoryStore
    from agent_core.values.states import RunState

    store = MemoryStore()
    llm.call_tool("noop")
    run = make_agent([noop], store=store).new_run("work")
    on_first(run, ToolStarted, lambda: llm.add(Reply(text=LONG_TEXT), stall_after(model_api, 1)))
    on_first(
        run,
        TextDelta,
        lambda: run.request_stop(StopReason.SHUTDOWN, "system:sigterm", source=StopSource.SIGNAL),
    )
    result = await run.run()

    assert result.outcome is Outcome.BLOCKED
    assert result.exit_code is ExitCode.SHUTDOWN
    assert result.process_status == 143
    assert not llm.requests[-1].completed
    checkpoint = await store.latest_checkpoint(run.id)
    assert checkpoint is not None and checkpoint.turn == 1
    assert [m["role"] for m in checkpoint.messages][-2:] == ["assistant", "tool"]
    stored = await store.get_run(run.id)
    assert stored is not None and stored.state is RunState.BLOCKED
    kinds = [e.kind for e in await store.events_for(run.id)]
    assert kinds == ["shutdown.received", "run.finished"]


async def test_the_stop_event_carries_the_typed_source_of_its_request(
    make_agent: AgentFactory,
) -> None:
    """What shows a stop (the status message) learns from the event itself where it came
    from: the final turn's timer words its Abort differently from a person's."""
    run = make_agent().new_run("anything")
    events = EventLog(run)
    assert run.request_stop(StopReason.STOP, "U1", source=StopSource.NATIVE)
    assert run.request_stop(StopReason.ABORT, "system:final-turn-timeout", source=StopSource.TIMER)
    assert [(e.reason, e.requested_by, e.source) for e in events.of(StopRequested)] == [
        (StopReason.STOP, "U1", StopSource.NATIVE),
        (StopReason.ABORT, "system:final-turn-timeout", StopSource.TIMER),
    ]
