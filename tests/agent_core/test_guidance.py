"""Guidance written while a run works reaches the model at the next turn boundary, as a
user-role message naming its author, and never earlier; a stop wins over it
(docs/stopping.md, Guidance).

Each reply is queued from the run's own progress events (a synchronous listener), so the
moment is exact; llmock stalls the stream server-side where it must still be in flight.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llmock.scenarios import Reply, StreamFault, ToolCall

from agent_core.tools.toolbox import tool
from agent_core.values.events import GuidanceDelivered, TextDelta, ToolStarted
from agent_core.values.guidance import Guidance, GuidanceInbox
from agent_core.values.outcomes import Outcome, RunResult
from agent_core.values.stop import StopReason, StopSource
from tests.agent_core.helpers import EventLog
from tests.agent_core.test_stop import on_first

if TYPE_CHECKING:
    from llmock.journal import RequestRecord
    from llmock.pytest_plugin import LLMock

    from tests.agent_core.helpers import AgentFactory


def messages(record: RequestRecord) -> list[dict[str, Any]]:
    body: dict[str, Any] = record.body or {}
    return list(body.get("messages", []))


def guidance_in(record: RequestRecord) -> list[dict[str, Any]]:
    return [m for m in messages(record) if "while you were working" in str(m.get("content"))]


def reply(text: str, author: str = "U2", gid: str | None = None) -> Guidance:
    return Guidance(id=gid or text, author=author, text=text, author_label=f"<@{author}>")


@tool
async def lookup(city: str) -> str:
    """Look up the weather."""
    return "21C"


async def test_guidance_sent_during_a_stream_goes_out_with_the_very_next_request(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.add(
        Reply(text="Looking it up now.", tool_calls=(ToolCall("lookup", {"city": "Oslo"}),)),
        StreamFault("stall", after_chunks=2, stall_seconds=0.2),
    )
    llm.reply("It is 21C in Bergen.")
    run = make_agent([lookup]).new_run("Weather in Oslo?", requester="U1")
    log = EventLog(run)
    on_first(run, TextDelta, lambda: run.add_guidance(reply("Actually, Bergen please.")))
    result = await run.run()

    first, second = llm.requests
    assert guidance_in(first) == []  # the stream in flight never sees it
    [sent] = guidance_in(second)
    assert sent["role"] == "user"
    assert sent["content"] == "Guidance from <@U2> while you were working: Actually, Bergen please."
    # It comes after the tool results of the step it interrupted, i.e. at the boundary.
    roles = [m["role"] for m in messages(second)]
    assert roles[-2:] == ["tool", "user"]
    [delivered] = log.of(GuidanceDelivered)
    assert [g.text for g in delivered.guidance] == ["Actually, Bergen please."]
    assert delivered.turn == 2
    assert result.outcome is Outcome.FINISHED
    assert result.undelivered_guidance == ()


async def test_several_replies_go_together_in_the_order_they_were_written(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.add(
        Reply(text="Checking.", tool_calls=(ToolCall("lookup", {"city": "Oslo"}),)),
        StreamFault("stall", after_chunks=1, stall_seconds=0.2),
    )
    llm.reply("Done.")
    run = make_agent([lookup]).new_run("Weather?", requester="U1")

    def three() -> None:
        run.add_guidance(reply("first", "U2"))
        run.add_guidance(reply("second", "U3"))
        run.add_guidance(reply("first", "U2"))  # the same reply delivered twice: once
        run.add_guidance(reply("third", "U1"))

    on_first(run, TextDelta, three)
    await run.run()

    _, second = llm.requests
    assert [m["content"].rsplit(": ", 1)[1] for m in guidance_in(second)] == [
        "first",
        "second",
        "third",
    ]
    assert [m["role"] for m in guidance_in(second)] == ["user"] * 3


async def test_a_reply_written_while_the_model_answers_gets_one_more_turn(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.add(Reply(text="The answer is 4."), StreamFault("stall", after_chunks=1, stall_seconds=0.2))
    llm.reply("Then it is 5.")
    run = make_agent().new_run("2 + 2?", requester="U1")
    on_first(run, TextDelta, lambda: run.add_guidance(reply("Use 2 + 3 instead.")))
    result = await run.run()

    assert len(llm.requests) == 2
    assert guidance_in(llm.requests[1])
    assert result.outcome is Outcome.FINISHED
    assert result.final_text == "Then it is 5."


async def test_a_pending_stop_wins_and_the_guidance_is_handed_back_undelivered(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    release = asyncio.Event()

    @tool
    async def build() -> str:
        """Run the build."""
        await release.wait()
        return "build ok"

    llm.call_tool("build", {})
    llm.call_tool(
        "final_report",
        {"outcome": "finished", "evidence": "Built.", "artifacts": [], "handoff": "None."},
    )
    run = make_agent([build]).new_run("Build it", requester="U1")
    log = EventLog(run)

    def steer_then_stop() -> None:
        run.add_guidance(reply("Also run the tests."))
        run.request_stop(StopReason.STOP, "U1", source=StopSource.BUTTON)
        release.set()

    on_first(run, ToolStarted, steer_then_stop)
    result = await run.run()

    final = llm.requests[-1]
    assert guidance_in(final) == []  # the final turn carries no guidance
    assert log.of(GuidanceDelivered) == []
    assert result.outcome is Outcome.USERINTERLUDE
    assert [g.text for g in result.undelivered_guidance] == ["Also run the tests."]
    # It survives the round trip through the store's JSON.
    restored = RunResult.from_dict(result.to_dict())
    assert [(g.author, g.text) for g in restored.undelivered_guidance] == [
        ("U2", "Also run the tests.")
    ]
    assert run.add_guidance(reply("too late")) is False


async def test_abort_leaves_queued_guidance_undelivered(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.add(
        Reply(text="Working on it, step by step, slowly."),
        StreamFault("stall", after_chunks=3, stall_seconds=30),
    )
    run = make_agent().new_run("Long job", requester="U1")

    def steer_then_abort() -> None:
        run.add_guidance(reply("Hurry up."))
        run.request_stop(StopReason.ABORT, "U1", source=StopSource.BUTTON)

    on_first(run, TextDelta, steer_then_abort)
    result = await run.run()

    assert len(llm.requests) == 1
    assert [g.text for g in result.undelivered_guidance] == ["Hurry up."]


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(text=st.text(), author=st.text(min_size=1, max_size=20))
def test_whatever_the_text_it_is_a_user_message_never_system_or_developer(
    text: str, author: str
) -> None:
    inbox = GuidanceInbox()
    inbox.add(Guidance(id="g", author=author, text=text))
    [message] = [g.message() for g in inbox.take()]
    assert message["role"] == "user"
    assert set(message) == {"role", "content"}
    assert message["content"].endswith(text)
