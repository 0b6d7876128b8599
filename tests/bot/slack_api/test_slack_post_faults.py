"""When Slack fails the status post: one status message per run, and no eternal buttons.

A ``chat.postMessage`` that answers 5xx or times out may or may not have posted
(docs/slack-setup.md, Rate limits: never resent blindly). The app tags every status
message with its run id (message metadata), reads the thread for it before posting
again, and the reconciler later ends any message that still shows Stop/Abort for a run
that has ended.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from agent_core import RunState, ThreadKey
from agent_core.values.clock import utcnow
from bot import messages
from bot.slack_api import rate_budget as slack_budget
from bot.views.answer import answer_metadata
from bot.views.status import run_metadata
from bot.workers.reconciler import ABANDONED_LOOKUP_S, FINAL_GRACE_S
from tests.bot.harness import WAIT_S, block_text, buttons, is_final
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL
from tests.system.workers import until_async

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from agent_core import RunRecord
    from tests.bot.harness import Bot
    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message

ANSWER = "The answer is 42."


def status_messages(slack: FakeSlack, thread_ts: str) -> list[Message]:
    """The app's messages in the thread other than its streamed answers."""
    return [m for m in slack.thread(DEFAULT_CHANNEL, thread_ts) if m.is_bot and m.stream is None]


async def mention(bot: Bot, text: str = "what is the answer?") -> str:
    """@mention the app in a new thread; its ts."""
    envelope = slack_requests.app_mention(f"<@{bot.slack.workspace.bot_user_id}> {text}")
    assert await bot.event(envelope) == 200
    return str(envelope["event"]["ts"])


async def session_closed(bot: Bot, thread_ts: str) -> None:
    """Wait for the run's last Slack call: its agent session set to "closed"."""
    await bot.slack.wait_for_call(
        "agents.sessions.setStatus",
        lambda c: c.args.get("thread_ts") == thread_ts and c.args.get("status") == "closed",
        timeout=WAIT_S,
    )


async def stored_run(bot: Bot, thread_ts: str) -> RunRecord:
    assert bot.app.ctx is not None
    (record,) = await bot.app.ctx.store.find_runs(
        thread=ThreadKey(bot.slack.workspace.team_id, DEFAULT_CHANNEL, thread_ts)
    )
    return record


async def ended_run(bot: Bot, thread_ts: str) -> RunRecord:
    """The thread's run once the store says it has ended (the database cannot notify)."""

    async def ended() -> RunRecord | None:
        assert bot.app.ctx is not None
        thread = ThreadKey(bot.slack.workspace.team_id, DEFAULT_CHANNEL, thread_ts)
        found = await bot.app.ctx.store.find_runs(thread=thread)
        return found[0] if found and found[0].state.is_terminal else None

    return await until_async(ended, what="the run to end", timeout=WAIT_S, every=0.05)


@pytest.mark.parametrize("fault", ["5xx-not-done", "5xx-done", "timeout-done", "timeout-not-done"])
async def test_a_status_post_of_unknown_fate_still_gives_one_status_message_that_ends(
    bot: Bot, llm: LLMock, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    kind, _, fate = fault.partition("-")
    landed = fate == "done"
    if kind == "timeout":
        monkeypatch.setattr(slack_budget, "REQUEST_TIMEOUT_S", 0.5)
        bot.slack.time_out_next("chat.postMessage", hold_s=5.0, landed=landed)
    else:
        bot.slack.fail_next("chat.postMessage", status=500, landed=landed)
    llm.reply(ANSWER)

    thread_ts = await mention(bot)
    await session_closed(bot, thread_ts)

    (status,) = status_messages(bot.slack, thread_ts)  # never a second status message
    assert is_final(status) and buttons(status) == []
    assert "Finished" in block_text(status)
    record = await stored_run(bot, thread_ts)
    assert record.state is RunState.FINISHED and record.status_ts == status.ts
    assert status.metadata == run_metadata(record.id)
    posts = bot.slack.calls("chat.postMessage")
    assert len(posts) == (1 if landed else 2)  # looked for it before posting again
    (lookup,) = bot.slack.calls("conversations.replies")
    assert lookup.args["ts"] == thread_ts and lookup.args["include_all_metadata"] in ("1", True)


async def test_every_status_message_carries_its_run_id(bot: Bot, llm: LLMock) -> None:
    llm.reply(ANSWER)
    thread_ts = await mention(bot)
    await session_closed(bot, thread_ts)

    (status,) = status_messages(bot.slack, thread_ts)
    record = await stored_run(bot, thread_ts)
    assert status.metadata == {
        "event_type": "threadpilot_run",
        "event_payload": {"run_id": record.id},
    }
    (answer,) = [m for m in bot.slack.thread(DEFAULT_CHANNEL, thread_ts) if m.stream]
    assert answer.metadata == answer_metadata(record.id)  # tagged, and told apart
    assert bot.slack.calls("conversations.replies") == []  # no fault, no lookup


async def test_the_reconciler_ends_the_buttons_of_a_run_abandoned_over_a_post_in_doubt(
    bot: Bot, llm: LLMock
) -> None:
    # The post lands but answers 500, and the thread cannot be read to find out: the
    # run is abandoned, and Slack shows its "Starting..." message with Stop and Abort.
    bot.slack.fail_next("chat.postMessage", status=500, landed=True)
    bot.slack.fail_next("conversations.replies", status=503, times=3)
    thread_ts = await mention(bot)
    abandoned = await ended_run(bot, thread_ts)
    (stale,) = status_messages(bot.slack, thread_ts)
    assert buttons(stale) and abandoned.status_ts is None and abandoned.state.is_terminal
    assert llm.requests == []  # the run never started

    assert bot.app.ctx is not None
    reconciler = bot.app.ctx.worker.reconciler
    later = utcnow() + timedelta(seconds=FINAL_GRACE_S + 1)
    report = await reconciler.run_once(later)

    repaired = bot.slack.message(stale.channel, stale.ts)
    assert is_final(repaired) and buttons(repaired) == []
    assert messages.STATUS_POST_IN_DOUBT in block_text(repaired)
    assert report.finals_reposted == 1
    record = await stored_run(bot, thread_ts)
    assert record.status_ts == stale.ts and record.final_posted_at is not None
    lookups = len(bot.slack.calls("conversations.replies"))
    await reconciler.run_once(later + timedelta(seconds=60))
    assert len(bot.slack.calls("conversations.replies")) == lookups  # settled for good
    assert len(bot.slack.message(stale.channel, stale.ts).history) == len(repaired.history)


async def test_the_reconciler_stops_looking_for_a_post_that_never_landed(
    bot: Bot, llm: LLMock
) -> None:
    bot.slack.fail_next("chat.postMessage", status=500)
    bot.slack.fail_next("conversations.replies", status=503, times=3)
    thread_ts = await mention(bot)
    await ended_run(bot, thread_ts)
    assert status_messages(bot.slack, thread_ts) == []
    assert bot.app.ctx is not None
    reconciler = bot.app.ctx.worker.reconciler

    # Within the window it keeps looking (the message might still show up)...
    soon = utcnow() + timedelta(seconds=FINAL_GRACE_S + 1)
    assert (await reconciler.run_once(soon)).finals_reposted == 0
    assert (await stored_run(bot, thread_ts)).final_posted_at is None
    # ...after it, the run is settled: nothing to repair, and no more lookups.
    late = utcnow() + timedelta(seconds=ABANDONED_LOOKUP_S + 1)
    await reconciler.run_once(late)
    lookups = len(bot.slack.calls("conversations.replies"))
    await reconciler.run_once(late + timedelta(seconds=60))

    assert len(bot.slack.calls("conversations.replies")) == lookups
    assert (await stored_run(bot, thread_ts)).final_posted_at is not None
    assert status_messages(bot.slack, thread_ts) == []  # nothing was invented
