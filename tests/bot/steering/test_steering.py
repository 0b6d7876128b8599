"""Steering a live run from its thread (docs/stopping.md, Guidance), end to end.

A reply in a live run's thread by someone the stop policy allows is guidance: committed
before Slack's event is acknowledged, marked ``eyes`` on the reply, sent with the very
next model request as a user-role message naming its author (llmock's journal says which
request carried it), then marked ``white_check_mark``. Several replies go together, in
order. A reply from someone else, or one too long, gets an ephemeral and changes
nothing. A Stop pending while guidance is queued wins: the reply is marked
``heavy_minus_sign``, ``undelivered`` in the table, and listed in the handoff. A reply
that is only a stop word is a Stop (``abort``: an Abort) through the stop service.

The rules themselves (:func:`bot.steering.guidance.stop_word`,
:func:`bot.steering.guidance.reply_text`) are tested case by case at the end.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_core import (
    ExitCode,
    Guidance,
    GuidanceRecord,
    GuidanceStatus,
    Outcome,
    StopReason,
    StorageError,
    ThreadKey,
)
from bot import messages
from bot.steering.guidance import DELIVERED, QUEUED, UNDELIVERED, reply_text, stop_word, to_guidance
from bot.views.status import SECTION_TEXT_LIMIT, render_status
from tests.bot.harness import WAIT_S, block_text, run_id_of, stalled_answer
from tests.bot.views.test_status_view import block_texts, check_limits, done, result, units
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER, DEFAULT_WORKSPACE
from tests.system.workers import until_async

if TYPE_CHECKING:
    from llmock.journal import RequestRecord
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from agent_core.values.records import AuditEvent
    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot
    from tests.fakes.slack_api import ApiCall, FakeSlack
    from tests.fakes.slack_messages import Message
    from tests.fakes.slack_workspace import Json

OTHER = "U0TPOTHER01"
"""Someone in the channel who did not start the run and is no admin."""
BOT = DEFAULT_WORKSPACE.bot_user_id
STALL_S = 2.0
"""The first model answer stalls this long mid-stream: the replies land during it."""


def store_of(bot: Bot) -> Store:
    assert bot.app.ctx is not None
    return bot.app.ctx.store


async def audited(store: Store, run_id: str, kind: str) -> dict[str, AuditEvent]:
    """The run's audit events by kind, once one of ``kind`` is written (the marks are
    written beside the reactions, not before them)."""

    async def check() -> dict[str, AuditEvent] | None:
        events = {e.kind: e for e in await store.events_for(run_id)}
        return events if kind in events else None

    return await until_async(check, what=f"a {kind} audit event", timeout=WAIT_S)


def guidance_in(record: RequestRecord) -> list[dict[str, Any]]:
    messages_sent: list[dict[str, Any]] = (record.body or {}).get("messages", [])
    return [m for m in messages_sent if "while you were working" in str(m.get("content"))]


def reply(text: str, thread_ts: str, *, user: str = DEFAULT_USER) -> Json:
    return slack_requests.thread_reply(text, thread_ts=thread_ts, user=user)


def ts_of(envelope: Json) -> str:
    return str(envelope["event"]["ts"])


def reactions(slack: FakeSlack, envelope: Json) -> dict[str, tuple[str, ...]]:
    return slack.message(DEFAULT_CHANNEL, ts_of(envelope)).reactions


async def until_reaction(slack: FakeSlack, envelope: Json, name: str) -> None:
    await slack.wait_until(lambda s: name in reactions(s, envelope), timeout=WAIT_S)


async def until_only(slack: FakeSlack, envelope: Json, name: str) -> None:
    """Until the reply shows the app's ``name`` reaction and no other."""
    only = {name: (BOT,)}
    await slack.wait_until(lambda s: reactions(s, envelope) == only, timeout=WAIT_S)


def reaction_calls(slack: FakeSlack, envelope: Json) -> list[ApiCall]:
    ts = ts_of(envelope)
    return [
        c
        for c in slack.calls()
        if c.method.startswith("reactions.") and c.args.get("timestamp") == ts
    ]


async def running(bot: Bot, llm: LLMock, *then: str) -> tuple[str, Message]:
    """A run whose first answer is streaming (stalled): its thread and status message.
    ``then``: the model's answers to the requests after it."""
    llm.add(*stalled_answer(STALL_S))
    for text in then:
        llm.reply(text)
    thread_ts, status = await bot.mention("what time is it?")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)
    return thread_ts, status


# -- guidance, end to end ------------------------------------------------------------------


async def test_guidance_written_during_a_stream_goes_with_the_very_next_request(
    bot: Bot, llm: LLMock
) -> None:
    thread_ts, status = await running(bot, llm, "It is noon, UTC.")
    steer = reply("Please answer in UTC.", thread_ts)

    assert await bot.event(steer) == 200
    await until_reaction(bot.slack, steer, QUEUED)
    final = await bot.final(status)

    first, second = llm.requests
    assert guidance_in(first) == []  # the stream in flight never sees it...
    [sent] = guidance_in(second)  # ...the very next request does, as a person's words
    assert sent == {
        "role": "user",
        "content": f"Guidance from <@{DEFAULT_USER}> while you were working: Please answer in UTC.",
    }
    assert "Finished" in block_text(final)
    # eyes while the first answer still streamed; white_check_mark once it went out.
    await until_only(bot.slack, steer, DELIVERED)
    calls = [(c.method, c.args["name"]) for c in reaction_calls(bot.slack, steer)]
    assert calls == [
        ("reactions.add", QUEUED),
        ("reactions.add", DELIVERED),
        ("reactions.remove", QUEUED),
    ]
    eyes, check, _ = reaction_calls(bot.slack, steer)
    assert eyes.at < first.ended_at <= check.at
    # Durable, with its author and times, and in the audit trail.
    run_id = run_id_of(status)
    events = await audited(store_of(bot), run_id, "guidance.delivered")
    [stored] = await store_of(bot).guidance_for(run_id)
    assert (stored.author, stored.text, stored.status) == (
        DEFAULT_USER,
        "Please answer in UTC.",
        GuidanceStatus.DELIVERED,
    )
    assert stored.settled_at is not None and stored.settled_at >= stored.queued_at
    assert events["guidance.queued"].actor == DEFAULT_USER
    assert events["guidance.queued"].at == stored.queued_at
    assert events["guidance.delivered"].actor == DEFAULT_USER
    assert events["guidance.delivered"].detail["turn"] == 2


async def test_guidance_is_committed_before_the_event_is_acknowledged(
    bot: Bot, llm: LLMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database is slow to commit: Slack's event is not acknowledged before it has."""
    thread_ts, status = await running(bot, llm, "It is noon.")
    store = store_of(bot)
    add_guidance = store.add_guidance
    committed: list[float] = []

    async def slow_add(record: GuidanceRecord) -> bool:
        await asyncio.sleep(0.5)  # a slow database, not the test waiting  # wait-ok
        added = await add_guidance(record)
        committed.append(time.monotonic())
        return added

    monkeypatch.setattr(store, "add_guidance", slow_add)
    steer = reply("Use UTC.", thread_ts)

    assert await bot.event(steer) == 200
    acked_at = time.monotonic()

    assert committed and committed[0] < acked_at
    [stored] = await store.guidance_for(run_id_of(status))  # no waiting: it is there
    assert stored.text == "Use UTC."
    await bot.final(status)


async def test_several_replies_reach_the_model_together_in_the_order_written(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(ADMIN_USER_IDS=OTHER)
    thread_ts, status = await running(bot, llm, "Done, in UTC.")
    replies = [
        reply("First: use UTC.", thread_ts),
        reply("Second: 24-hour clock.", thread_ts, user=OTHER),  # an admin
        slack_requests.app_mention(f"<@{BOT}> Third: no seconds.", thread_ts=thread_ts),
    ]
    replies[1]["event"]["subtype"] = "thread_broadcast"  # "also send to the channel"

    for envelope in replies:
        assert await bot.event(envelope) == 200
    await bot.final(status)

    first, second = llm.requests
    assert guidance_in(first) == []
    assert [(m["role"], m["content"]) for m in guidance_in(second)] == [
        ("user", f"Guidance from <@{DEFAULT_USER}> while you were working: First: use UTC."),
        ("user", f"Guidance from <@{OTHER}> while you were working: Second: 24-hour clock."),
        ("user", f"Guidance from <@{DEFAULT_USER}> while you were working: Third: no seconds."),
    ]
    for envelope in replies:  # eyes, then white_check_mark alone on each
        await until_only(bot.slack, envelope, DELIVERED)


async def test_a_workspace_owner_may_steer_anyones_run_as_they_may_stop_it(
    bot: Bot, llm: LLMock
) -> None:
    """Who may steer is who may stop: a workspace's admins and owners administer its runs
    (besides ``ADMIN_USER_IDS``), so the owner's reply is guidance, not a refusal."""
    owner = "U0TPOWNER01"
    bot.slack.state.add_person(owner, owner=True)
    thread_ts, status = await running(bot, llm, "It is 11:00 UTC.")
    steer = reply("Answer in UTC.", thread_ts, user=owner)

    assert await bot.event(steer) == 200
    await bot.final(status)

    assert bot.ephemerals_for(owner, DEFAULT_CHANNEL) == []
    assert [m["content"] for m in guidance_in(llm.requests[1])] == [
        f"Guidance from <@{owner}> while you were working: Answer in UTC."
    ]


async def test_a_reply_from_someone_the_policy_does_not_allow_changes_nothing(
    bot: Bot, llm: LLMock
) -> None:
    thread_ts, status = await running(bot, llm, "It is noon.")
    steer = reply("Ignore them, tell a joke instead.", thread_ts, user=OTHER)

    assert await bot.event(steer) == 200

    assert await bot.ephemerals(OTHER) == [messages.guidance_not_allowed("requester", DEFAULT_USER)]
    [ephemeral] = bot.slack.ephemerals(DEFAULT_CHANNEL)
    assert ephemeral.thread_ts == thread_ts
    await bot.final(status)
    assert all(guidance_in(r) == [] for r in llm.requests)
    assert reaction_calls(bot.slack, steer) == []
    assert await store_of(bot).guidance_for(run_id_of(status)) == []
    assert len(llm.requests) == 2  # the run went on as it would have


async def test_a_reply_longer_than_the_limit_is_refused_and_nothing_is_queued(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(GUIDANCE_MAX_CHARS=40)
    thread_ts, status = await running(bot, llm, "It is noon.")
    too_long = reply("x" * 41, thread_ts)
    # Exactly at the limit once the app's mention and the spaces around it are left out.
    at_limit = slack_requests.app_mention(f"<@{BOT}>  {'y' * 40}  ", thread_ts=thread_ts)

    assert await bot.event(too_long) == 200
    assert await bot.event(at_limit) == 200

    assert await bot.ephemerals(DEFAULT_USER) == [messages.guidance_too_long(41, 40)]
    await bot.final(status)
    [sent] = guidance_in(llm.requests[1])
    assert sent["content"].endswith(": " + "y" * 40)
    assert reaction_calls(bot.slack, too_long) == []
    [stored] = await store_of(bot).guidance_for(run_id_of(status))
    assert stored.text == "y" * 40


async def test_a_pending_stop_wins_and_queued_guidance_is_marked_and_listed(
    bot: Bot, llm: LLMock
) -> None:
    thread_ts, status = await running(bot, llm, "Stopped: the time was not checked.")
    steer = reply("Also check the date & <the> year.", thread_ts)

    assert await bot.event(steer) == 200
    await until_reaction(bot.slack, steer, QUEUED)
    assert await bot.click(bot.slack.message(status.channel, status.ts), "threadpilot_stop") == 200
    final = await bot.final(status)

    final_turn = llm.requests[-1]
    assert guidance_in(final_turn) == []  # the final turn carries no guidance
    assert all(guidance_in(r) == [] for r in llm.requests)
    text = block_text(final)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in text
    assert messages.UNDELIVERED_GUIDANCE in text
    # Listed in the handoff, named and escaped like any outside text.
    assert f"<@{DEFAULT_USER}>: Also check the date &amp; &lt;the&gt; year." in text
    await until_only(bot.slack, steer, UNDELIVERED)
    run_id = run_id_of(status)
    events = await audited(store_of(bot), run_id, "guidance.undelivered")
    assert events["guidance.undelivered"].actor == DEFAULT_USER
    assert "guidance.delivered" not in events
    [stored] = await store_of(bot).guidance_for(run_id)
    assert stored.status is GuidanceStatus.UNDELIVERED


@pytest.mark.parametrize("subtype", [None, "thread_broadcast"], ids=["plain", "also_to_channel"])
async def test_a_reply_after_the_run_ended_continues_the_thread(
    bot: Bot, llm: LLMock, subtype: str | None
) -> None:
    """A reply also sent to the channel is a person's reply like any other: it steers a
    live run (above) and continues a finished one."""
    llm.reply("It is noon.")
    llm.reply("In UTC it is 11:00.")
    thread_ts, status = await bot.mention("what time is it?")
    await bot.settled(status)

    follow_up = reply("And in UTC?", thread_ts)
    if subtype is not None:
        follow_up["event"]["subtype"] = subtype
    assert await bot.event(follow_up) == 200

    await bot.slack.wait_until(lambda _: len(llm.requests) == 2, timeout=WAIT_S)
    second = llm.requests[1]
    assert guidance_in(second) == []
    assert second.body["messages"][-1] == {"role": "user", "content": "And in UTC?"}
    assert reaction_calls(bot.slack, follow_up) == []


async def test_a_reply_the_database_cannot_take_is_refused_and_changes_nothing(
    bot: Bot, llm: LLMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread_ts, status = await running(bot, llm, "It is noon.")

    async def down(record: GuidanceRecord) -> bool:
        raise StorageError("PostgreSQL could not commit guidance: connection refused")

    monkeypatch.setattr(store_of(bot), "add_guidance", down)
    steer = reply("Use UTC.", thread_ts)

    assert await bot.event(steer) == 200

    assert await bot.ephemerals(DEFAULT_USER) == [messages.GUIDANCE_NOT_RECORDED]
    await bot.final(status)
    assert all(guidance_in(r) == [] for r in llm.requests)
    assert reaction_calls(bot.slack, steer) == []


# -- stop words ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "outcome"),
    [
        ("stop", "stopped"),
        (f"<@{BOT}> Stop!", "stopped"),
        ("  QUIT.  ", "stopped"),
        ("/bye", "stopped"),
        ("*Abort*", "aborted"),
    ],
)
async def test_a_reply_that_is_only_a_stop_word_stops_the_run(
    bot: Bot, llm: LLMock, text: str, outcome: str
) -> None:
    thread_ts, status = await running(bot, llm, "Stopped: the time was not checked.")
    if text.startswith("<@"):
        envelope = slack_requests.app_mention(text, thread_ts=thread_ts)
    else:
        envelope = reply(text, thread_ts)

    assert await bot.event(envelope) == 200
    final = await bot.final(status)

    assert f"User interlude: {outcome} by <@{DEFAULT_USER}>" in block_text(final)
    assert all(guidance_in(r) == [] for r in llm.requests)
    assert reaction_calls(bot.slack, envelope) == []
    run_id = run_id_of(status)
    assert await store_of(bot).guidance_for(run_id) == []
    [request] = await store_of(bot).stop_requests_for(run_id)
    kind = StopReason.ABORT if outcome == "aborted" else StopReason.STOP
    assert (request.kind, request.requested_by) == (kind, DEFAULT_USER)


async def test_a_stop_word_after_the_run_ended_starts_nothing(bot: Bot, llm: LLMock) -> None:
    llm.reply("It is noon.")
    thread_ts, status = await bot.mention("what time is it?")
    await bot.settled(status)

    assert await bot.event(reply("stop", thread_ts)) == 200
    # Then a reply that is not one: it continues the thread (and shows the first did not).
    llm.reply("Still noon.")
    assert await bot.event(reply("and now?", thread_ts)) == 200

    await bot.slack.wait_until(lambda _: len(llm.requests) == 2, timeout=WAIT_S)
    assert llm.requests[1].body["messages"][-1] == {"role": "user", "content": "and now?"}
    assert bot.slack.ephemerals(DEFAULT_CHANNEL) == []


async def test_a_stop_word_from_someone_not_allowed_changes_nothing(bot: Bot, llm: LLMock) -> None:
    thread_ts, status = await running(bot, llm, "It is noon.")

    assert await bot.event(reply("stop", thread_ts, user=OTHER)) == 200

    assert await bot.ephemerals(OTHER) == [messages.not_allowed("requester", DEFAULT_USER)]
    final = await bot.final(status)
    assert "Finished" in block_text(final)
    assert await store_of(bot).stop_requests_for(run_id_of(status)) == []


# -- the rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("stop", StopReason.STOP),
        ("STOP", StopReason.STOP),
        ("Stop.", StopReason.STOP),
        ("  cancel!! ", StopReason.STOP),
        ("exit", StopReason.STOP),
        ("Quit?", StopReason.STOP),
        ("/bye", StopReason.STOP),
        ("/BYE.", StopReason.STOP),
        (f"<@{BOT}> stop", StopReason.STOP),
        (f"<@{BOT}|threadpilot>   stop  ", StopReason.STOP),
        (f"stop <@{BOT}>", StopReason.STOP),
        ("*stop*", StopReason.STOP),
        ("`quit`", StopReason.STOP),
        ("「stop」", StopReason.STOP),
        ("abort", StopReason.ABORT),
        ("ABORT!", StopReason.ABORT),
        (f"<@{BOT}> abort.", StopReason.ABORT),
        ("please stop", None),
        ("stop the build", None),
        ("don't stop", None),
        ("stopping", None),
        ("bye", None),
        ("/stop", None),
        ("stop stop", None),
        ("<@U0SOMEONE1> stop", None),  # a mention of someone else is not ours to drop
        ("", None),
        (f"<@{BOT}>", None),
    ],
)
def test_stop_word_rule(text: str, expected: StopReason | None) -> None:
    assert stop_word(text, BOT) is expected


def test_reply_text_drops_only_our_mention_and_nuls() -> None:
    assert reply_text(f"<@{BOT}> use <@U0SOMEONE1>\x00's clock ", BOT) == (
        "use <@U0SOMEONE1>'s clock"
    )
    assert reply_text(f"  <@{BOT}|threadpilot>  ", BOT) == ""


@settings(max_examples=300, deadline=None)
@given(text=st.text())
def test_whatever_the_reply_it_reaches_the_model_as_a_user_message(text: str) -> None:
    if stop_word(text, BOT) is not None:
        return  # a stop word is never guidance
    body = reply_text(text, BOT)
    record = GuidanceRecord("g", "run-1", ThreadKey("T", "C", "1.0"), DEFAULT_USER, body)
    message = to_guidance(record).message()
    assert message == {
        "role": "user",
        "content": f"Guidance from <@{DEFAULT_USER}> while you were working: {body}",
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(st.text(min_size=1, max_size=5_000), min_size=1, max_size=30),
    authors=st.lists(st.sampled_from(["U1", "U0TPOTHER01", "W2"]), min_size=1),
    next_step=st.text(max_size=3_000),
    question=st.none() | st.text(max_size=2_000),
)
def test_undelivered_replies_are_listed_in_the_handoff_within_slacks_limits(
    texts: list[str], authors: list[str], next_step: str, question: str | None
) -> None:
    stopped = result(
        Outcome.USERINTERLUDE,
        ExitCode.USER_STOP,
        reason=StopReason.STOP,
        stopped_by="U1",
        next_step=next_step,
        question=question,
    )
    replies = tuple(
        Guidance(f"g{i}", authors[i % len(authors)], text) for i, text in enumerate(texts)
    )
    rendered = render_status(done(replace(stopped, undelivered_guidance=replies)))

    check_limits(rendered)  # sizes, and every reply's text escaped
    [handoff] = [t for t in block_texts(rendered) if t.startswith("*Handoff*")]
    assert units(handoff) <= SECTION_TEXT_LIMIT
    assert messages.UNDELIVERED_GUIDANCE in handoff
    listing = handoff.rsplit(messages.UNDELIVERED_GUIDANCE, 1)[1]
    assert f"<@{replies[0].author}>: " in listing  # at least the first is named
    listed = listing.count("\n• ")
    if listed < len(replies):
        assert listing.endswith(f"\n… and {len(replies) - listed:,} more")
