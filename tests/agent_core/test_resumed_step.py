"""A resume keeps the turn it paid for (docs/stopping.md; :mod:`agent_core.run.step_log`).

The run's checkpoint is written as soon as the model's reply is complete, before any of
its calls runs, and again as each call starts and each result arrives. A run resumed from
such a checkpoint finishes that step without asking the model again: it runs only the
calls with no result, never one that had started (the model reads that its effect is
unknown), and the request's spend goes on from what was checkpointed.

A lost worker is played by abandoning the first run (its task cancelled, as a ``kill -9``
would leave it: nothing after the checkpoint counts) and starting a second from the
checkpoint the store held while the first was in the middle of its step.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING

from agent_core.run.agent import Agent
from agent_core.run.step_log import in_call_order, unknown_effect
from agent_core.testing import HandApprovals, MemoryStore, ScriptedChatModel, ScriptedTurn
from agent_core.tools.toolbox import Tool, remote_tool, tool
from agent_core.values.approvals import ApprovalStatus
from agent_core.values.chat import ToolCall
from agent_core.values.ended import EndedBecause
from agent_core.values.records import RunRecord, ThreadKey
from bot.workers.orphan_results import orphan_result

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from agent_core.run.loop import Run
    from agent_core.values.chat import ChatMessage
    from agent_core.values.records import Checkpoint

THREAD = ThreadKey("T1", "C1", "1.0")
ANSWER = "All done."


def agent(
    model: ScriptedChatModel,
    store: MemoryStore,
    tools: Sequence[Tool],
    approvals: HandApprovals | None = None,
) -> Agent:
    return Agent(model, tools, store=store, approvals=approvals)


def new_run(agent: Agent, **more: Any) -> Run:
    return agent.new_run("do the thing", run_id="run-1", thread=THREAD, **more)


async def abandon(task: asyncio.Task[Any]) -> None:
    """The first life ends here: nothing it would still write counts."""
    task.cancel()
    await asyncio.wait([task])


def results(messages: Sequence[ChatMessage]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


async def test_the_reply_is_checkpointed_before_its_call_runs_with_the_spend() -> None:
    store = MemoryStore()
    seen: list[Checkpoint | None] = []

    @tool
    async def look() -> str:
        """Look."""
        seen.append(await store.latest_checkpoint("run-1"))
        return "looked"

    model = ScriptedChatModel([ScriptedTurn("Let me look.", tool_calls=(("look", {}),))])
    result = await new_run(agent(model, store, [look])).run()

    assert result.final_text == "Done."
    [during] = seen
    assert during is not None
    reply = during.messages[-1]
    assert reply["role"] == "assistant" and reply["content"] == "Let me look."
    [call] = reply["tool_calls"]
    assert during.started == (call["id"],)  # written as the call started, before it ran
    assert during.spent is not None and during.spent.total_tokens > 0
    assert during.spent.tool_calls == 1
    after = await store.latest_checkpoint("run-1")
    assert after is not None and after.started == ()
    assert results(after.messages) == {call["id"]: "looked"}


async def test_a_call_that_had_started_is_not_run_again_and_its_effect_is_unknown() -> None:
    store = MemoryStore()
    entered = asyncio.Event()
    runs = 0

    @tool
    async def deploy() -> str:
        """Deploy."""
        nonlocal runs
        runs += 1
        entered.set()
        await asyncio.Event().wait()  # the worker is lost while this runs
        return "deployed"

    first = ScriptedChatModel([ScriptedTurn(tool_calls=(("deploy", {}),))])
    task = asyncio.create_task(new_run(agent(first, store, [deploy])).run())
    await entered.wait()
    checkpoint = await store.latest_checkpoint("run-1")
    await abandon(task)
    assert checkpoint is not None

    second = ScriptedChatModel(default_text=ANSWER)
    resumed = new_run(agent(second, store, [deploy]), restore=checkpoint, spent=checkpoint.spent)
    result = await resumed.run()

    assert result.final_text == ANSWER
    assert runs == 1  # never run twice
    [request] = second.requests  # only the turn after the call: the reply was kept
    [call_id] = checkpoint.started
    unknown = unknown_effect(ToolCall(call_id, "deploy", "{}"))
    assert results(request.messages) == {call_id: unknown}
    assert "effect is unknown" in unknown
    roles = [m["role"] for m in request.messages]
    assert roles[roles.index("tool") + 1] == "system"  # the resumed note, after the result


async def test_the_results_that_arrived_are_kept_and_a_held_call_waits_on_the_same_approval() -> (
    None
):
    store = MemoryStore()
    reads = 0

    @tool
    async def read() -> str:
        """Read."""
        nonlocal reads
        reads += 1
        return "the file"

    async def write(arguments: dict[str, Any]) -> str:
        return "written"

    write_tool = remote_tool("write", "Write.", {"type": "object"}, write, needs_approval=True)
    tools = [read, write_tool]
    turn = ScriptedTurn(tool_calls=(("read", {}), ("write", {"x": 1})))
    first_approvals = HandApprovals()
    first = ScriptedChatModel([turn])
    task = asyncio.create_task(new_run(agent(first, store, tools, first_approvals)).run())
    asked = await first_approvals.next_request()

    async def read_result_stored() -> Checkpoint:
        while True:
            checkpoint = await store.latest_checkpoint("run-1")
            if checkpoint is not None and len(results(checkpoint.messages)) == 1:
                return checkpoint
            await asyncio.sleep(0)

    checkpoint = await asyncio.wait_for(read_result_stored(), 5)
    await abandon(task)

    approvals = HandApprovals()
    second = ScriptedChatModel(default_text=ANSWER)
    resumed = new_run(
        agent(second, store, tools, approvals), restore=checkpoint, spent=checkpoint.spent
    )
    running = asyncio.create_task(resumed.run())
    again = await approvals.next_request()
    assert (again.call_id, again.tool, again.arguments) == (
        asked.call_id,
        asked.tool,
        asked.arguments,
    )
    assert second.requests == []  # waiting on the person, not asking the model
    approvals.decide(again.id, ApprovalStatus.APPROVED, "<@U1>")
    result = await running

    assert result.final_text == ANSWER
    assert reads == 1  # its result was checkpointed: kept, not run again
    [request] = second.requests
    assert sorted(results(request.messages).values()) == ["the file", "written"]


async def test_the_spend_is_kept_through_a_lost_worker() -> None:
    store = MemoryStore()
    entered = asyncio.Event()

    @tool
    async def slow() -> str:
        """Slow."""
        entered.set()
        await asyncio.Event().wait()
        return "never"

    first = ScriptedChatModel([ScriptedTurn("thinking out loud " * 20, tool_calls=(("slow", {}),))])
    task = asyncio.create_task(new_run(agent(first, store, [slow])).run())
    await entered.wait()
    checkpoint = await store.latest_checkpoint("run-1")
    await abandon(task)
    assert checkpoint is not None and checkpoint.spent is not None

    # The reconciler ends the orphan with the checkpoint's spend; its resume goes on from it.
    record = RunRecord(id="run-1", thread=THREAD, requester="U1", task="do the thing")
    ended = orphan_result(record, [], checkpoint, record.created_at)
    assert ended.ended_because is EndedBecause.WORKER_LOST
    assert ended.spent == checkpoint.spent
    second = ScriptedChatModel(default_text=ANSWER)
    resumed = new_run(agent(second, store, [slow]), restore=checkpoint, spent=ended.spent)
    result = await resumed.run()

    assert result.spent is not None
    before = dataclasses.replace(checkpoint.spent, elapsed_s=0.0)
    assert result.spent.completion_tokens > before.completion_tokens
    assert result.spent.prompt_tokens > before.prompt_tokens
    assert result.spent.tool_calls == before.tool_calls == 1


def test_results_written_as_they_were_known_reach_the_model_in_the_order_of_its_calls() -> None:
    # A refusal is written before the admitted calls run, and a resumed step's results
    # arrive after those the checkpoint held: the model still reads them in call order.
    reply: ChatMessage = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "t", "arguments": "{}"}}
            for i in ("a", "b", "c")
        ],
    }
    results: list[ChatMessage] = [
        {"role": "tool", "tool_call_id": i, "content": i} for i in ("c", "a", "b")
    ]
    messages: list[ChatMessage] = [{"role": "user", "content": "go"}, reply, *results]

    in_call_order(messages)

    assert [m.get("tool_call_id") for m in messages[2:]] == ["a", "b", "c"]
    assert messages[:2] == [{"role": "user", "content": "go"}, reply]
