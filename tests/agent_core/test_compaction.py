"""Context exhausted (docs/stopping.md): llmock enforces a context window that fills up; the run
ends ``blocked`` / ``context_exhausted``; one summary request that fits the same window
compacts it; a new run continues from the summary, linked to the old one; the summary
can be stopped like a run."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest
from llmock.scenarios import Reply

from agent_core.models.api import ModelAPI
from agent_core.run.compaction import (
    Compacted,
    Compaction,
    CompactionFailed,
    CompactionStopped,
    continue_from,
    transcript,
    window_from_error,
)
from agent_core.stores.memory import MemoryStore
from agent_core.tools.toolbox import tool
from agent_core.values.ended import EndedBecause
from agent_core.values.outcomes import ExitCode, Outcome
from agent_core.values.prompts import SUMMARY_INSTRUCTION, continuation_note
from agent_core.values.stop import StopReason, StopSource
from tests.agent_core.helpers import WAIT_S, system_messages
from tests.agent_core.test_stop import LONG_TEXT, stall_after

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from agent_core.values.chat import ChatMessage
    from tests.agent_core.helpers import AgentFactory

WINDOW = 1_300
"""Tokens (llmock estimates 4 characters a token): the system prompt, the request and
two log pages fit; a third page overflows it."""
PAGE = "ERROR disk full on /var/data; " * 66  # about 2,000 characters, 500 tokens

SUMMARY = (
    "Task: find why the nightly backup fails.\n"
    "Done and verified: read the log three times; every page says the disk is full.\n"
    "Artifacts: none.\n"
    "Remaining: free space on /var/data, then rerun the backup.\n"
    "Open questions: none."
)


@tool
def read_log() -> str:
    """Read the next page of the backup log."""
    return PAGE


async def test_a_full_context_is_continued_from_a_summary(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.limits(context_window=WINDOW)
    llm.call_tool("read_log", times=4)  # the fourth is the request the window refuses
    store = MemoryStore()
    agent = make_agent([read_log], store=store)
    run = agent.new_run("find why the nightly backup fails")
    result = await run.run()

    assert [r.status for r in llm.requests] == [200, 200, 200, 400]
    assert result.outcome is Outcome.BLOCKED
    assert result.exit_code is ExitCode.TOKEN_LIMIT
    assert result.ended_because is EndedBecause.CONTEXT_EXHAUSTED
    assert "continues in a new run from a summary" in result.handoff.next_step
    assert window_from_error(result.error) == WINDOW
    checkpoint = await store.latest_checkpoint(run.id)
    assert checkpoint is not None
    assert sum(m["role"] == "tool" for m in checkpoint.messages) == 3

    # One summary request of its own, small enough for the window that overflowed.
    llm.reply(SUMMARY)
    compaction = Compaction(
        agent.model,
        checkpoint.messages,
        compaction_id="next-run",
        context_window=window_from_error(result.error) or 0,
    )
    compacted = await compaction.run()

    assert isinstance(compacted, Compacted)
    assert compacted.summary == SUMMARY
    summary_request = llm.requests[-1]
    assert summary_request.status == 200  # llmock would refuse a prompt over the window
    assert "tools" not in summary_request.body  # a summary, not a turn of work
    sent = summary_request.body["messages"]
    assert sent[0] == {"role": "system", "content": SUMMARY_INSTRUCTION}
    assert sent[1]["role"] == "user"
    assert sent[1]["content"].startswith("Person: find why the nightly backup fails")
    assert "earlier messages left out" in sent[1]["content"]
    assert compacted.left_out > 0

    # A new run in the same thread starts from the summary, linked to the old run.
    llm.reply("Freed space on /var/data; the backup now runs.")
    follow_up = continue_from(
        agent,
        compacted,
        task=run.task,
        previous_run_id=run.id,
        run_id="next-run",
        thread=run.thread,
    )
    finished = await follow_up.run()

    first = llm.requests[-1]
    assert first.status == 200
    messages = first.body["messages"]
    assert continuation_note(run.id) in system_messages(first)
    assert {"role": "assistant", "content": SUMMARY} in messages
    assert messages[-1] == {"role": "user", "content": run.task}
    assert not any(m["role"] == "tool" for m in messages)  # the old pages are gone
    assert finished.outcome is Outcome.FINISHED
    assert finished.continued_from == run.id
    assert finished.to_dict()["continued_from"] == run.id
    record = await store.get_run("next-run")
    assert record is not None and record.thread == run.thread
    assert record.result is not None and record.result["continued_from"] == run.id


def test_the_summary_instruction_asks_for_what_the_handoff_needs() -> None:
    for heading in ("Task:", "Done and verified:", "Artifacts:", "Remaining:", "Open questions:"):
        assert heading in SUMMARY_INSTRUCTION


async def test_a_stop_ends_the_summary_at_once_and_closes_its_stream(
    llm: LLMock, make_agent: AgentFactory
) -> None:
    llm.add(Reply(text=LONG_TEXT), stall_after(ModelAPI.OPENAI_CHAT, 2))
    streaming = asyncio.Event()
    compaction = Compaction(
        make_agent().model,
        [{"role": "user", "content": "do a thing"}],
        compaction_id="c1",
        on_text=lambda _text: streaming.set(),
    )
    task = asyncio.create_task(compaction.run())
    async with asyncio.timeout(WAIT_S):
        await streaming.wait()
    assert compaction.request_stop(StopReason.STOP, "U1", source=StopSource.BUTTON)
    outcome = await task

    assert isinstance(outcome, CompactionStopped)
    assert outcome.request.reason is StopReason.STOP
    assert outcome.request.requested_by == "U1"
    assert compaction.control.honoured_at is not None
    (record,) = llm.requests
    assert not record.completed  # the server saw the client hang up mid-stream
    assert record.duration < 30


@pytest.mark.parametrize("reason", [StopReason.ABORT, StopReason.SHUTDOWN, StopReason.STOP])
async def test_a_request_before_it_starts_means_no_model_call(
    llm: LLMock, make_agent: AgentFactory, reason: StopReason
) -> None:
    compaction = Compaction(make_agent().model, [], compaction_id="c2")
    compaction.request_stop(reason, "U1")
    outcome = await compaction.run()

    assert isinstance(outcome, CompactionStopped) and outcome.request.reason is reason
    assert llm.requests == []


async def test_a_failed_summary_request_is_a_value(llm: LLMock, make_agent: AgentFactory) -> None:
    llm.fail(503)
    outcome = await Compaction(make_agent().model, [], compaction_id="c3").run()

    assert isinstance(outcome, CompactionFailed)
    assert outcome.error.status == 503
    assert len(llm.requests) == 1  # one request, no retries: the resume policy decides


async def test_cancelled_from_outside_it_propagates(llm: LLMock, make_agent: AgentFactory) -> None:
    llm.add(Reply(text=LONG_TEXT), stall_after(ModelAPI.OPENAI_CHAT, 2))
    streaming = asyncio.Event()
    compaction = Compaction(
        make_agent().model, [], compaction_id="c4", on_text=lambda _t: streaming.set()
    )
    task = asyncio.create_task(compaction.run())
    async with asyncio.timeout(WAIT_S):
        await streaming.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (record,) = llm.requests
    assert not record.completed


# -- the transcript -------------------------------------------------------------------


def _conversation(pages: int) -> list[ChatMessage]:
    messages: list[ChatMessage] = [
        {"role": "system", "content": "the loop's own instructions"},
        {"role": "user", "content": "the request"},
    ]
    for i in range(pages):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"page {i} " * 50})
    messages.append({"role": "assistant", "content": "the latest finding"})
    return messages


def test_the_transcript_keeps_the_request_and_the_newest_messages() -> None:
    text, left_out = transcript(_conversation(20), budget_chars=2_000)

    assert len(text) <= 2_000 + 200  # the gap note and separators
    assert text.startswith("Person: the request\n\n[... ")
    assert text.endswith("Agent: the latest finding")
    assert "Result of read: page 19" in text
    assert "page 0 " not in text
    assert "the loop's own instructions" not in text
    assert f"[... {left_out} earlier messages left out ...]" in text


def test_a_short_conversation_is_kept_whole() -> None:
    text, left_out = transcript(_conversation(1), budget_chars=10_000)

    assert left_out == 0
    assert "left out" not in text
    assert text.split("\n\n") == [
        "Person: the request",
        "Agent called read({})",
        "Result of read: " + "page 0 " * 50,
        "Agent: the latest finding",
    ]


def test_long_messages_are_cut_and_say_so() -> None:
    messages: list[ChatMessage] = [
        {"role": "user", "content": "x" * 10_000},
        {"role": "assistant", "content": "y" * 5_000},
    ]
    text, _ = transcript(messages, budget_chars=20_000)
    assert "[... 6000 characters cut]" in text  # the request keeps 4,000
    assert "[... 3500 characters cut]" in text  # any other message 1,500


@pytest.mark.parametrize(
    ("message", "window"),
    [
        ("This model's maximum context length is 8192 tokens. However, ...", 8192),
        ("prompt is too long: 250000 tokens > 200000 maximum", 200000),
        ("something else", None),
        (None, None),
    ],
)
def test_the_window_is_read_from_the_overflow_error(
    message: str | None, window: int | None
) -> None:
    assert window_from_error(message) == window
