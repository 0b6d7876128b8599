"""Slack's agent surfaces in the thread, as documented: the streamed answer's task
timeline (tools and sub-agents as ``task_update`` chunks under the run's task as the
``plan_update`` title), a stream Slack ends after about five minutes (the answer goes
on with ``chat.update`` and loses nothing), and the agent session's status at every
ending (never left ``processing``). The real app (tests/bot harness), llmock, the fake
Slack (its stream expiry set short), and the fake MCP server for a slow tool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from llmock.scenarios import Reply, ToolCall
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import ResumeSettings
from bot.workers.reconciler import Reconciler
from tests.bot.harness import (
    ACTION_ABORT,
    LONG_TEXT,
    WAIT_S,
    block_text,
    run_id_of,
    stalled_answer,
)
from tests.bot.runs.test_mcp_app import fake_url, write_config
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_messages import StreamState
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from agent_core import Checkpoint, RunRecord
    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot
    from tests.fakes.mcp_server import FakeMcpServer
    from tests.fakes.slack_messages import Message
    from tests.fakes.slack_workspace import Json

__all__ = ["fake_url"]  # the MCP fixture, used here by name (`fake` is in tests/conftest.py)

TASK = "count the files in src"


@pytest.fixture
async def mcp_bot(make_bot: BotFactory, tmp_path: Any, fake_url: str) -> Bot:
    return await make_bot(MCP_CONFIG=write_config(tmp_path, {"fake": {"url": fake_url}}))


def streamed(slack: FakeSlack, thread_ts: str) -> Message | None:
    """The run's streamed answer message in the thread, if it has one."""
    found = [m for m in slack.thread(DEFAULT_CHANNEL, thread_ts) if m.stream is not None]
    return found[0] if found else None


def tasks(message: Message | None) -> dict[str, Json]:
    """Each task the stream showed, by id: its latest ``task_update`` (fields merged)."""
    latest: dict[str, Json] = {}
    for chunk in message.chunks if message else ():
        if chunk["type"] == "task_update":
            latest[chunk["id"]] = {**latest.get(chunk["id"], {}), **chunk}
    return latest


def plan_titles(message: Message | None) -> list[str]:
    return [c["title"] for c in (message.chunks if message else ()) if c["type"] == "plan_update"]


async def until_task(bot: Bot, thread_ts: str, title: str, status: str, details: str = "") -> Json:
    """Wait until the stream shows the task titled ``title`` with ``status`` (and
    ``details`` in its details)."""

    def shown(slack: FakeSlack) -> Json | None:
        for task in tasks(streamed(slack, thread_ts)).values():
            if task["title"] == title and task["status"] == status:
                if details in str(task.get("details", "")):
                    return task
        return None

    found = await bot.slack.wait_until(shown, timeout=WAIT_S)
    assert found is not None
    return found


async def session_closed(bot: Bot, thread_ts: str) -> list[str]:
    """Wait until the thread's agent session is closed; every status the app set there."""
    await bot.slack.wait_until(
        lambda s: s.state.session_status(DEFAULT_CHANNEL, thread_ts) == "closed", timeout=WAIT_S
    )
    calls = bot.slack.calls("agents.sessions.setStatus")
    return [c.args["status"] for c in calls if c.args.get("thread_ts") == thread_ts]


# -- the stream's task timeline ------------------------------------------------------------


async def test_a_tool_call_is_a_task_in_the_stream_under_the_run_s_task(
    mcp_bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    llm.add(Reply(text="Let me run it. ", tool_calls=(ToolCall("fake__slow", {"steps": 1}),)))
    llm.reply("The slow job is done.")
    thread_ts, status = await mcp_bot.mention(TASK)

    running = await until_task(mcp_bot, thread_ts, "fake__slow", "in_progress", "go-ahead")
    fake.release()
    await mcp_bot.settled(status)

    message = streamed(mcp_bot.slack, thread_ts)
    assert message is not None and message.stream is StreamState.STOPPED
    assert plan_titles(message) == [TASK]
    (done,) = tasks(message).values()
    assert done["id"] == running["id"]
    assert (done["title"], done["status"]) == ("fake__slow", "complete")
    assert "Let me run it." in message.text and "The slow job is done." in message.text
    start = mcp_bot.slack.calls("chat.startStream")[0]
    assert start.args["task_display_mode"] == "timeline"


async def test_a_sub_agent_is_a_task_followed_to_its_end(
    mcp_bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    llm.call_tool("delegate", {"task": "Count the files in src/", "tools": ["fake__slow"]})
    llm.call_tool("fake__slow", {"steps": 1})  # the sub-agent's first turn
    llm.reply("Counted 120 files.")  # its second
    llm.reply("The sub-agent counted 120 files in src/.")  # the parent's second
    thread_ts, status = await mcp_bot.mention(TASK)

    await until_task(
        mcp_bot, thread_ts, "Count the files in src/", "in_progress", "turn 1: Running the tool"
    )
    fake.release()
    await mcp_bot.settled(status)

    message = streamed(mcp_bot.slack, thread_ts)
    shown = list(tasks(message).values())
    # The delegate call itself is not a task: its sub-agent is.
    assert [(t["title"], t["status"]) for t in shown] == [("Count the files in src/", "complete")]
    assert shown[0]["details"] == "Finished"
    assert plan_titles(message) == [TASK]


async def test_a_tool_cut_off_by_an_abort_is_closed_as_an_error(
    mcp_bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    llm.call_tool("fake__slow", {"steps": 2})
    thread_ts, status = await mcp_bot.mention(TASK)
    await until_task(mcp_bot, thread_ts, "fake__slow", "in_progress", "go-ahead")

    assert await mcp_bot.click(status, ACTION_ABORT) == 200
    statuses = await session_closed(mcp_bot, thread_ts)

    assert statuses == ["processing", "closed"]
    message = streamed(mcp_bot.slack, thread_ts)
    assert message is not None and message.stream is StreamState.STOPPED
    assert [t["status"] for t in tasks(message).values()] == ["error"]


async def test_where_streaming_is_refused_the_status_message_shows_the_progress(
    mcp_bot: Bot, llm: LLMock, fake: FakeMcpServer
) -> None:
    mcp_bot.slack.make_unknown("chat.startStream")
    llm.call_tool("delegate", {"task": "Count the files in src/", "tools": ["fake__slow"]})
    llm.call_tool("fake__slow", {"steps": 1})
    llm.reply("Counted 120 files.")
    llm.reply("The sub-agent counted 120 files in src/.")
    thread_ts, status = await mcp_bot.mention(TASK)

    working = await mcp_bot.until(status, lambda m: "waiting for the go-ahead" in block_text(m))
    assert (
        ":hourglass_flowing_sand: Count the files in src/ · turn 1: Running the tool "
        "`fake__slow`: waiting for the go-ahead (0/1)"
    ) in block_text(working)
    fake.release()
    final = await mcp_bot.settled(status)

    assert ":white_check_mark: Count the files in src/ · Finished" in block_text(final)
    assert "The sub-agent counted 120 files in src/." in block_text(final)
    assert streamed(mcp_bot.slack, thread_ts) is None
    assert mcp_bot.slack.calls("chat.appendStream") == []


# -- a stream Slack ends ---------------------------------------------------------------------


async def test_a_stream_that_expires_mid_answer_goes_on_with_chat_update(
    bot: Bot, llm: LLMock
) -> None:
    bot.slack.state.stream_ttl_s = 0.3
    # Three chunks stream, then the model stalls past the stream's life, then the rest.
    llm.add(*stalled_answer(1.0, with_tool=False))
    thread_ts, status = await bot.mention("write a lot")

    await bot.settled(status)

    expired = await bot.slack.wait_for_call(
        "chat.appendStream", lambda c: c.error == "message_not_in_streaming_state", timeout=WAIT_S
    )
    message = streamed(bot.slack, thread_ts)
    assert message is not None and message.ts == expired.args["ts"]
    assert message.stream is StreamState.EXPIRED
    assert message.text == LONG_TEXT  # every word, the ones after the expiry too
    assert message.blocks == [{"type": "markdown", "text": LONG_TEXT}]
    assert message.history[-1].method == "chat.update"
    # Slack would refuse it: the stream is not stopped after its end.
    assert bot.slack.calls("chat.stopStream") == []


async def test_an_expired_stream_keeps_its_tasks_as_a_plan(bot: Bot, llm: LLMock) -> None:
    bot.slack.state.stream_ttl_s = 0.3
    llm.add(
        Reply(text="Checking the clock. ", tool_calls=(ToolCall("current_time", {}),)),
    )
    llm.add(*stalled_answer(1.0, with_tool=False))
    thread_ts, status = await bot.mention(TASK)

    await bot.settled(status)

    message = streamed(bot.slack, thread_ts)
    assert message is not None and message.stream is StreamState.EXPIRED
    plan, answer = message.blocks or []
    assert (plan["type"], plan["title"]) == ("plan", TASK)
    assert [(t["title"], t["status"]) for t in plan["tasks"]] == [("current_time", "complete")]
    assert answer == {"type": "markdown", "text": f"Checking the clock. {LONG_TEXT}"}


# -- the agent session ---------------------------------------------------------------------


async def test_the_session_is_closed_after_a_normal_end(bot: Bot, llm: LLMock) -> None:
    llm.reply("Done.")
    thread_ts, _ = await bot.mention(TASK)

    assert await session_closed(bot, thread_ts) == ["processing", "closed"]
    (first, _) = bot.slack.calls("agents.sessions.setStatus")
    assert first.args["title"] == TASK


async def test_the_session_of_a_run_the_reconciler_ends_is_closed(bot: Bot, llm: LLMock) -> None:
    llm.add(*stalled_answer())
    thread_ts, status = await bot.mention(TASK)
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)
    assert bot.slack.state.session_status(DEFAULT_CHANNEL, thread_ts) == "processing"
    ctx = bot.app.ctx
    assert ctx is not None
    record = await ctx.store.get_run(run_id_of(status))
    assert record is not None

    async def no_resume(record: RunRecord, checkpoint: Checkpoint | None) -> None:
        raise AssertionError("auto-resume is off for this test")

    # Another worker decides this one is gone and ends the run as an orphan.
    worker_b = Reconciler(
        ctx.store,
        ctx.workspaces,
        worker_id="worker-b",
        lease_ttl_s=3,
        resume=no_resume,
        is_local=lambda _: False,
        policy=ResumeSettings(auto_resume=frozenset()),
    )
    assert await worker_b.end_orphan(record)

    assert await session_closed(bot, thread_ts) == ["processing", "closed"]


# -- the fake Slack holds the app to the documented shapes -----------------------------------


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token="xoxb-test-token", base_url=slack.api_url)


async def refused(call: Any) -> str:
    with pytest.raises(SlackApiError) as caught:
        await call
    return str(caught.value.response["error"])


async def test_the_fake_refuses_what_slack_refuses(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    parent = slack.seed_message(DEFAULT_CHANNEL, "question")
    team = slack.workspace.team_id

    def start(**args: Any) -> Any:
        return client.chat_startStream(channel=DEFAULT_CHANNEL, thread_ts=parent, **args)

    def for_user(**args: Any) -> Any:
        return start(recipient_user_id=DEFAULT_USER, recipient_team_id=team, **args)

    assert await refused(start(markdown_text="x")) == "missing_recipient_team_id"
    assert await refused(start(recipient_team_id=team)) == "missing_recipient_user_id"
    bad_chunks: list[Json] = [
        {"type": "markdown", "text": "x"},
        {"type": "task_update", "id": "t1", "title": "Search", "status": "running"},
        {"type": "task_update", "id": "t1", "status": "complete"},
        {"type": "plan_update"},
        {"type": "markdown_text"},
    ]
    for chunk in bad_chunks:
        assert await refused(for_user(chunks=[chunk])) == "invalid_chunks", chunk
    assert await refused(for_user(task_display_mode="list")) == "invalid_arguments"
    assert (await for_user(chunks=[{"type": "plan_update", "title": TASK}]))["ok"]

    for status in ("", "thinking", "Processing", "done"):
        set_status = client.api_call(
            "agents.sessions.setStatus",
            json={"channel_id": DEFAULT_CHANNEL, "thread_ts": parent, "status": status},
        )
        assert await refused(set_status) == "invalid_arguments", status
    assert slack.state.session_status(DEFAULT_CHANNEL, parent) is None


async def test_the_fake_s_streams_expire() -> None:
    async with FakeSlack(stream_ttl_s=0.0) as slack:
        client = AsyncWebClient(token="xoxb-test-token", base_url=slack.api_url)
        parent = slack.seed_message(DEFAULT_CHANNEL, "question")
        chunks: list[Json] = [
            {"type": "plan_update", "title": "Count the files"},
            {"type": "task_update", "id": "t1", "title": "Search", "status": "in_progress"},
            {"type": "markdown_text", "text": "Counting."},
        ]
        started = await client.chat_startStream(
            channel=DEFAULT_CHANNEL,
            thread_ts=parent,
            chunks=chunks,
            recipient_user_id=DEFAULT_USER,
            recipient_team_id=slack.workspace.team_id,
        )
        ts = str(started["ts"])
        append = client.chat_appendStream(channel=DEFAULT_CHANNEL, ts=ts, markdown_text=" more")
        assert await refused(append) == "message_not_in_streaming_state"
        stop = client.chat_stopStream(channel=DEFAULT_CHANNEL, ts=ts)
        assert await refused(stop) == "message_not_in_streaming_state"

        message = slack.message(DEFAULT_CHANNEL, ts)
        assert (message.text, message.stream) == ("Counting.", StreamState.EXPIRED)
        assert list(message.chunks) == chunks
        await client.chat_update(channel=DEFAULT_CHANNEL, ts=ts, text="Counting. more")
        assert slack.message(DEFAULT_CHANNEL, ts).text == "Counting. more"
