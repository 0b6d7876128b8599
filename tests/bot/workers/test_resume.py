"""Why a run ended, and resuming it when that is safe (docs/stopping.md).

The real app against the fake Slack and llmock, on a real SQLite file. A rate-limited
run pauses (its status message says why, and when it resumes, with ``Resume now`` and
``Don't resume``), then resumes in the same message and finishes; a run whose context
fills up is continued by a new run in the thread from a summary; a person's stop keeps
the thread from resuming on its own for ``USER_EXIT_GRACE``; ``MAX_AUTO_RESUMES`` caps
the resumes of a thread; people cancel or hurry a scheduled resume through the stop
service. ``MAX_RETRY_AFTER`` is set low, so a 429 whose Retry-After is longer ends the run
at once (the retry budget spent) instead of being waited out in the run.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
from llmock.scenarios import Fail, Match, Reply, StreamFault, ToolCall

from agent_core import ConfigError, EndedBecause, RunState, StopReason
from agent_core.values.prompts import SUMMARY_INSTRUCTION, continuation_note, resumed_note
from agent_core.values.records import ResumeState
from bot import messages
from bot.config.settings import load_settings
from bot.views.status import ACTION_ABORT, ACTION_DONT_RESUME, ACTION_RESUME_NOW, ACTION_STOP
from tests.bot.harness import SHORT_TEXT, WAIT_S, buttons, run_id_of, stalled_answer
from tests.fakes import slack_requests
from tests.fakes.slack_blocks import blocks_text
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER
from tests.system.workers import until

if TYPE_CHECKING:
    from llmock.journal import Journal
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from agent_core.values.records import AuditEvent, RunRecord
    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot
    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message, Revision

FAST = {"MAX_RETRY_AFTER": 0.1}
"""A Retry-After above 0.1 s ends the run blocked at once, to resume after it."""
ANSWER = "The report is summarised: three findings, all fixed."
OTHER_USER = "U0OTHER01"


# -- reading Slack and the database ----------------------------------------------------


def text_of(message: Message | Revision) -> str:
    return blocks_text(message.blocks) if message.blocks else message.text


def paused(message: Message | Revision) -> bool:
    """The status message of a run that ended and says when it resumes."""
    return "Resumes on its own at" in text_of(message)


def finished(message: Message) -> bool:
    return (
        not buttons(message) and "Evidence" in text_of(message) and "Finished" in text_of(message)
    )


def done(message: Message) -> bool:
    """Ended, with no resume ahead (no buttons at all)."""
    return not buttons(message) and "Why it ended" in text_of(message)


def resume_epoch(message: Message | Revision) -> int:
    found = re.search(r"<!date\^(\d+)\^\{time_secs\}", text_of(message))
    assert found is not None, text_of(message)
    return int(found.group(1))


async def stored(bot: Bot, run_id: str) -> RunRecord:
    record = await store_of(bot).get_run(run_id)
    assert record is not None
    return record


def store_of(bot: Bot) -> Store:
    assert bot.app.ctx is not None
    return bot.app.ctx.store


async def events(bot: Bot, run_id: str, kind: str) -> list[AuditEvent]:
    return [e for e in await store_of(bot).events_for(run_id) if e.kind == kind]


async def new_status_message(bot: Bot, thread_ts: str, after: str) -> Message:
    """The status message of a newer run in the thread (posted after ``after``)."""

    def find(slack: FakeSlack) -> Message | None:
        for message in slack.thread(DEFAULT_CHANNEL, thread_ts):
            if message.is_bot and message.stream is None and float(message.ts) > float(after):
                if message.metadata and message.metadata.get("event_type") == "threadpilot_run":
                    return message
        return None

    found = await bot.slack.wait_until(find, timeout=WAIT_S)
    assert found is not None
    return found


async def mention_in_thread(bot: Bot, text: str, thread_ts: str) -> None:
    envelope = slack_requests.app_mention(
        f"<@{bot.slack.workspace.bot_user_id}> {text}", thread_ts=thread_ts
    )
    assert await bot.event(envelope) == 200


async def say_in_thread(bot: Bot, text: str, thread_ts: str) -> None:
    assert await bot.event(slack_requests.thread_reply(text, thread_ts=thread_ts)) == 200


def transcript(slack: FakeSlack, thread_ts: str) -> str:
    """The thread as a person reads it now: each message's final text, in order."""
    lines = []
    for message in slack.thread(DEFAULT_CHANNEL, thread_ts):
        who = "threadpilot" if message.is_bot else f"<@{message.user}>"
        body = text_of(message) if message.stream is None else message.text
        lines.append(f"--- {who}:\n{body.strip()}")
    return "\n".join(lines)


def rate_limited(retry_after: float, *, times: int = 1) -> Fail:
    return Fail(429, retry_after=retry_after, code="rate_limit_exceeded", times=times)


async def start_with_one_turn(bot: Bot, llm: LLMock, *then: Any) -> tuple[str, Message]:
    """Start a run whose turn 1 (a tool call) completes, checkpointed; ``then`` applies
    to the requests after it (queued while turn 1 streams, so turn 1 is not affected)."""
    llm.add(Reply(tool_calls=(ToolCall("current_time", {}),)), ONE_MOMENT)
    started = await bot.mention("summarise the report")
    journal = llm_journal(llm)
    await until(lambda: journal.in_flight == 1, what="turn 1 streaming")
    llm.add(*then)
    return started


ONE_MOMENT = StreamFault("stall", after_chunks=1, stall_seconds=1.0)
"""Turn 1's stream pauses this long: time to queue what the next requests get."""


# -- rate limits -----------------------------------------------------------------------


async def test_a_rate_limited_run_pauses_says_when_then_resumes_in_its_message_and_finishes(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(**FAST)
    # Turn 1 (a tool call) completes; then two 429s in a row, each with a Retry-After
    # past the retry budget: the run pauses twice (resumed from its checkpoint each
    # time), then the provider answers.
    thread_ts, status = await start_with_one_turn(
        bot, llm, rate_limited(1.0, times=2), Reply(text=ANSWER)
    )
    run_id = run_id_of(status)

    final = await bot.until(status, finished)

    pauses = [r for r in final.history if paused(r)]
    assert len(pauses) == 2, [text_of(r) for r in final.history]
    for pause in pauses:
        text = text_of(pause)
        assert messages.why_ended("rate_limit") in text
        assert {"Resume now", "Don't resume"} <= set(text.splitlines())
    assert ANSWER in transcript(bot.slack, thread_ts)
    record = await stored(bot, run_id)
    assert (record.state, record.auto_resumes, record.ended_because) == (
        RunState.FINISHED,
        2,
        EndedBecause.COMPLETED,
    )
    # Each resume was decided with its reason, and started no earlier than its time.
    scheduled = await events(bot, run_id, "resume.scheduled")
    resumed = await events(bot, run_id, "run.resumed")
    assert len(scheduled) == len(resumed) == 2
    for decision, start, pause in zip(scheduled, resumed, pauses, strict=True):
        at = datetime.fromisoformat(decision.detail["at"])
        assert decision.detail["reason"].startswith("Rate limited by the model provider")
        assert start.at >= at
        assert resume_epoch(pause) == int(at.timestamp())
        assert start.detail["ended_because"] == "rate_limit"
    # The resumed run went on from its checkpoint, told why it had paused.
    assert [r.status for r in llm.requests] == [200, 429, 429, 200]
    last = llm.requests[-1].body["messages"]
    assert {"role": "system", "content": resumed_note(EndedBecause.RATE_LIMIT)} in last
    assert sum(m["role"] == "tool" for m in last) == 1  # turn 1's result, not redone
    print(f"\n== rate limit resumed ==\n{transcript(bot.slack, thread_ts)}")
    print(f"-- (the status message while paused:)\n{text_of(pauses[0])}")


async def test_resumes_stop_at_max_auto_resumes_in_a_thread(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(MAX_AUTO_RESUMES=2, **FAST)
    llm.add(rate_limited(0.5, times=5))
    _, status = await bot.mention("summarise the report")
    run_id = run_id_of(status)

    final = await bot.until(status, done)

    limit = "Already auto-resumed 2 times in this thread (MAX_AUTO_RESUMES 2)"
    assert messages.not_resuming(limit + "; not auto-resuming") in text_of(final)
    assert len([r for r in final.history if paused(r)]) == 2
    assert [r.status for r in llm.requests] == [429, 429, 429]
    record = await stored(bot, run_id)
    assert (record.state, record.resume, record.auto_resumes) == (
        RunState.BLOCKED,
        ResumeState.DECLINED,
        2,
    )
    (declined,) = await events(bot, run_id, "resume.declined")
    assert declined.detail["reason"].startswith(limit)
    assert await store_of(bot).pending_resumes() == []


async def test_a_resumed_run_shows_stop_and_abort_at_once_and_can_be_stopped(
    make_bot: BotFactory, llm: LLMock
) -> None:
    """The resumed run writes to the status message whose paused report was written:
    it is live again, so the message shows Stop and Abort (not Resume now), and they work."""
    bot = await make_bot(**FAST)
    _, status = await start_with_one_turn(
        bot, llm, rate_limited(0.5), *stalled_answer(30.0, with_tool=False, text=SHORT_TEXT)
    )

    def live_again(message: Message) -> bool:
        return any(paused(r) for r in message.history) and buttons(message) == [
            ACTION_STOP,
            ACTION_ABORT,
        ]

    resumed = await bot.until(status, live_again)
    assert "Resume now" not in text_of(resumed)
    assert await bot.click(resumed, ACTION_STOP) == 200
    stopping = await bot.until(status, lambda m: buttons(m) == [ACTION_ABORT])
    assert "Stopping" in text_of(stopping)
    assert await bot.click(stopping, ACTION_ABORT) == 200
    aborted = await bot.until(status, done)
    assert f"aborted by <@{DEFAULT_USER}>" in text_of(aborted)


async def test_a_report_that_will_not_resume_does_not_promise_it_and_counts_in_words(
    make_bot: BotFactory, llm: LLMock
) -> None:
    """The second pause of a thread allowed one auto-resume: its report says once that it
    will not resume, and counts its turns and resumes as a person would."""
    bot = await make_bot(MAX_AUTO_RESUMES=1, **FAST)
    llm.add(rate_limited(0.5, times=5))
    _, status = await bot.mention("summarise the report")

    final = await bot.until(status, done)

    text = text_of(final)
    limit = "Already auto-resumed 1 time in this thread (MAX_AUTO_RESUMES 1)"
    assert messages.not_resuming(limit + "; not auto-resuming") in text
    assert "resumes it" not in text  # the handoff promises nothing the policy declined
    assert "1 model turn," in text
    for number, noun in re.findall(r"\b(\d+) (model turns?|tool calls?|times?)\b", text):
        assert noun.endswith("s") == (number != "1"), f"{number} {noun} in:\n{text}"


async def test_auto_resume_none_leaves_a_rate_limited_run_paused(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(AUTO_RESUME="none", **FAST)
    llm.add(rate_limited(0.5))
    _, status = await bot.mention("summarise the report")

    final = await bot.until(status, done)

    assert "which AUTO_RESUME does not list" in text_of(final)
    assert len(llm.requests) == 1


# -- people: a stop's grace, Don't resume, Resume now, Stop ---------------------------


async def test_after_a_person_stops_a_run_nothing_in_the_thread_resumes_within_the_grace(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(**FAST)
    llm.add(Reply(text="Reading the report. " * 20), StreamFault("stall", after_chunks=2))
    thread_ts, first = await bot.mention("summarise the report")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)
    assert await bot.click(first, ACTION_ABORT) == 200
    first = await bot.until(first, done)
    assert messages.why_ended("user_exit") in text_of(first)
    first_id = run_id_of_done(first, bot)

    # The person asks again in the thread; this run is rate-limited.
    llm.add(rate_limited(0.5))
    await mention_in_thread(bot, "try again please", thread_ts)
    second = await new_status_message(bot, thread_ts, after=first.ts)
    second = await bot.until(second, done)

    text = text_of(second)
    assert messages.why_ended("rate_limit") in text
    assert "Not resuming on its own: a person stopped a run in this thread" in text
    assert "USER_EXIT_GRACE 10 min" in text
    second_id = run_id_of_done(second, bot)
    record = await stored(bot, second_id)
    assert (record.state, record.resume) == (RunState.BLOCKED, ResumeState.DECLINED)
    assert await store_of(bot).pending_resumes() == []  # no worker will ever start it
    assert len(llm.requests) == 2
    # The person's own run: declined with the seed's words, in the log and the audit.
    (declined,) = await events(bot, first_id, "resume.declined")
    assert declined.detail["reason"] == "Session ended by user, not auto-resuming"
    print(f"\n== user stop not resumed ==\n{transcript(bot.slack, thread_ts)}")


def run_id_of_done(message: Message, bot: Bot) -> str:
    """The run a status message belongs to, from its metadata (ended: no Stop button)."""
    assert message.metadata is not None
    return str(message.metadata["event_payload"]["run_id"])


async def test_dont_resume_cancels_the_scheduled_resume(make_bot: BotFactory, llm: LLMock) -> None:
    bot = await make_bot(**FAST)
    llm.add(rate_limited(60.0))
    _, status = await bot.mention("summarise the report")
    status = await bot.until(status, paused)
    run_id = run_id_of_done(status, bot)

    assert await bot.click(status, ACTION_DONT_RESUME) == 200

    final = await bot.until(status, done)
    assert messages.resume_cancelled(DEFAULT_USER) in text_of(final)
    record = await stored(bot, run_id)
    assert (record.resume, record.resume_by, record.resume_at) == (
        ResumeState.CANCELLED,
        DEFAULT_USER,
        None,
    )
    (cancelled,) = await events(bot, run_id, "resume.cancelled")
    assert (cancelled.actor, cancelled.detail["source"]) == (DEFAULT_USER, "button")
    assert await store_of(bot).pending_resumes() == []
    assert len(llm.requests) == 1


async def test_resume_now_starts_it_at_once(make_bot: BotFactory, llm: LLMock) -> None:
    bot = await make_bot(**FAST)
    llm.add(rate_limited(600.0))
    llm.reply(ANSWER)
    _, status = await bot.mention("summarise the report")
    status = await bot.until(status, paused)
    run_id = run_id_of_done(status, bot)

    assert await bot.click(status, ACTION_RESUME_NOW) == 200

    await bot.until(status, finished)
    (hurried,) = await events(bot, run_id, "resume.hurried")
    assert hurried.actor == DEFAULT_USER
    (resumed,) = await events(bot, run_id, "run.resumed")
    assert (resumed.at - hurried.at).total_seconds() < WAIT_S  # not the 600 s Retry-After


async def test_only_who_may_stop_it_may_cancel_or_hurry_its_resume(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(**FAST)
    llm.add(rate_limited(60.0))
    _, status = await bot.mention("summarise the report")
    status = await bot.until(status, paused)
    run_id = run_id_of_done(status, bot)

    assert await bot.click(status, ACTION_DONT_RESUME, user=OTHER_USER) == 200
    assert await bot.click(status, ACTION_RESUME_NOW, user=OTHER_USER) == 200

    answers = await bot.ephemerals(OTHER_USER, count=2)
    assert answers == [messages.resume_not_allowed("requester", DEFAULT_USER)] * 2
    assert "can resume or cancel" in answers[0]
    record = await stored(bot, run_id)
    assert (record.resume, record.resume_by) == (ResumeState.SCHEDULED, None)


async def test_a_stop_on_a_scheduled_resume_cancels_it_and_posts_the_handoff(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(**FAST)
    llm.add(rate_limited(60.0))
    thread_ts, status = await bot.mention("summarise the report")
    status = await bot.until(status, paused)
    run_id = run_id_of_done(status, bot)

    await say_in_thread(bot, "stop", thread_ts)

    final = await bot.until(status, done)
    text = text_of(final)
    assert messages.resume_cancelled(DEFAULT_USER) in text
    assert "Handoff" in text and "Evidence" in text
    record = await stored(bot, run_id)
    assert record.resume is ResumeState.CANCELLED
    # A person's stop, on the record: it starts the thread's USER_EXIT_GRACE.
    (request,) = await store_of(bot).stop_requests_for(run_id)
    assert (request.kind, request.requested_by, request.status) == (
        StopReason.STOP,
        DEFAULT_USER,
        "handled",
    )
    assert await store_of(bot).last_user_stop(record.thread) == request.requested_at
    kinds = [e.kind for e in await store_of(bot).events_for(run_id)]
    assert "stop.requested" in kinds and "resume.cancelled" in kinds
    assert len(llm.requests) == 1  # nothing started, and no run from the word "stop"


# -- a full context --------------------------------------------------------------------

WINDOW = 1_000
"""Tokens (llmock counts 4 characters a token): the request, its system prompt and one
page fit; a second page overflows it."""
PAGE = "ERROR disk full on /var/data; " * 66  # about 2,000 characters
SUMMARY = (
    "Task: find why the nightly backup fails.\n"
    "Done and verified: read the log twice; every page says the disk is full.\n"
    "Artifacts: none.\n"
    "Remaining: free space on /var/data, then rerun the backup.\n"
    "Open questions: none."
)
CONTINUED_ANSWER = "The backup fails because /var/data is full; free space, then rerun it."


def fill_the_window(llm: LLMock) -> None:
    llm.limits(context_window=WINDOW)
    llm.add(Reply(text=PAGE, tool_calls=(ToolCall("current_time", {}),), times=3))


async def test_a_full_context_is_continued_in_a_new_run_from_a_summary(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot()
    fill_the_window(llm)
    thread_ts, first = await bot.mention("find why the nightly backup fails")
    first_id = run_id_of(first)
    # (The summary and the continuation's answer, queued behind the three pages.)
    llm.reply(SUMMARY)
    llm.reply(CONTINUED_ANSWER)

    first = await bot.until(
        first, lambda m: messages.RESUME_CONTINUED in text_of(m) and not buttons(m)
    )
    second = await new_status_message(bot, thread_ts, after=first.ts)
    second = await bot.until(second, finished)

    assert messages.why_ended("context_exhausted") in text_of(first)
    statuses = [r.status for r in llm.requests]
    assert statuses == [200, 200, 400, 200, 200], statuses
    summary_request, continuation = (r.body["messages"] for r in llm.requests[3:])
    assert summary_request[0] == {"role": "system", "content": SUMMARY_INSTRUCTION}
    assert {"role": "assistant", "content": SUMMARY} in continuation
    assert {"role": "system", "content": continuation_note(first_id)} in continuation
    second_id = run_id_of_done(second, bot)
    record = await stored(bot, second_id)
    assert (record.continued_from, record.auto_resumes, record.thread) == (
        first_id,
        1,
        (await stored(bot, first_id)).thread,
    )
    before = await stored(bot, first_id)
    assert (before.state, before.resume, before.ended_because) == (
        RunState.BLOCKED,
        ResumeState.STARTED,
        EndedBecause.CONTEXT_EXHAUSTED,
    )
    (continued,) = await events(bot, first_id, "run.continued")
    assert continued.detail["continuation"] == second_id
    assert CONTINUED_ANSWER in transcript(bot.slack, thread_ts)
    print(f"\n== context continued ==\n{transcript(bot.slack, thread_ts)}")


async def test_the_summary_is_stoppable_through_the_stop_service(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot()
    fill_the_window(llm)
    thread_ts, first = await bot.mention("find why the nightly backup fails")
    first_id = run_id_of(first)
    # The summary request (the one offering no tools) streams a little, then stalls.
    stall = StreamFault("stall", after_chunks=1, stall_seconds=60, match=Match(tools=False))
    llm.add(Reply(text=SUMMARY), stall)
    journal = llm_journal(llm)
    await until(lambda: journal.in_flight == 1 and len(journal.records()) == 3, what="summary")

    await say_in_thread(bot, "stop", thread_ts)

    final = await bot.until(first, done)
    assert messages.resume_cancelled(DEFAULT_USER) in text_of(final)
    record = await stored(bot, first_id)
    assert record.resume is ResumeState.CANCELLED
    assert len(await store_of(bot).find_runs(thread=record.thread)) == 1  # no continuation
    summary = llm.requests[3]
    assert not summary.completed  # its stream was closed


def llm_journal(llm: LLMock) -> Journal:
    """llmock's journal, read without waiting for requests in flight."""
    journal: Journal = llm._server.state.journal
    return journal


# -- settings --------------------------------------------------------------------------

_REQUIRED = {
    "SLACK_BOT_TOKEN": "xoxb-resume-test",
    "SLACK_SIGNING_SECRET": "secret",
    "OPENAI_API_KEY": "key",
    "OPENAI_MODEL": "model",
}


def settings(**values: str) -> Any:
    return load_settings(_env_file=None, **_REQUIRED, **values)


def test_resume_settings_are_read_by_the_core_parsers() -> None:
    read = settings(AUTO_RESUME="Rate_Limit, shutdown", MAX_AUTO_RESUMES="5", USER_EXIT_GRACE="90s")
    policy = read.resume_settings
    assert policy.auto_resume == {EndedBecause.RATE_LIMIT, EndedBecause.SHUTDOWN}
    assert (policy.max_auto_resumes, policy.user_exit_grace.total_seconds()) == (5, 90)

    default = settings().resume_settings
    assert default.auto_resume == {
        EndedBecause.RATE_LIMIT,
        EndedBecause.CONTEXT_EXHAUSTED,
        EndedBecause.SHUTDOWN,
        EndedBecause.WORKER_LOST,
    }
    assert (default.max_auto_resumes, default.user_exit_grace.total_seconds()) == (3, 600)


def test_auto_resume_on_restart_false_is_an_alias_taking_out_restarts() -> None:
    policy = settings(AUTO_RESUME_ON_RESTART="false").resume_settings
    assert policy.auto_resume == {EndedBecause.RATE_LIMIT, EndedBecause.CONTEXT_EXHAUSTED}


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("AUTO_RESUME", "rate_limit,bogus"),
        ("AUTO_RESUME", "completed"),
        ("MAX_AUTO_RESUMES", "-1"),
        ("MAX_AUTO_RESUMES", "many"),
        ("USER_EXIT_GRACE", "soon"),
        ("MAX_RETRY_AFTER", "-5"),
    ],
)
def test_a_bad_resume_setting_is_named(name: str, raw: str) -> None:
    with pytest.raises(ConfigError) as raised:
        settings(**{name: raw})
    assert raised.value.setting == name
    assert "\n" not in str(raised.value)


def test_the_resume_time_is_shown_in_the_readers_zone() -> None:
    at = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)
    assert messages.resume_scheduled(at) == (
        f"Resumes on its own at <!date^{int(at.timestamp())}^{{time_secs}}|12:00:30 UTC>."
    )
