"""``Continue`` under a run that spent its budget (docs/stopping.md, Budgets).

The real app against the fake Slack and llmock, on a real SQLite file. A run whose
budget runs out wraps up (blocked, ``EXIT-BUDGET``) and is never resumed on its own; its
final message names the budget and what was spent, and offers ``Continue`` to the
requester and admins (whatever ``STOP_POLICY`` says), within the requester's
``MAX_RUNS_PER_USER``. One press, through the stop service, gives it one more budget of
the same size: a new run in the thread, from the run's checkpoint. Every other press is
answered ephemerally and changes nothing.

An automatic resume is the same request, not a new one: it goes on with what the request
had spent (stored in the ended run's result), so its budget runs out at the request's
total.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from llmock.scenarios import Reply, ToolCall

from agent_core import EndedBecause, RunResult, RunState
from agent_core.values.prompts import resumed_note
from agent_core.values.records import ResumeState
from bot import messages
from bot.views.status import ACTION_CONTINUE
from tests.agent_core.helpers import offered_tools, tool_results
from tests.bot.harness import (
    ACTION_ABORT,
    SECRET,
    SHORT_TEXT,
    WAIT_S,
    buttons,
    is_final,
    run_id_of,
    stalled_answer,
)
from tests.bot.workers.test_resume import (
    FAST,
    OTHER_USER,
    SUMMARY,
    events,
    fill_the_window,
    new_status_message,
    rate_limited,
    run_id_of_done,
    start_with_one_turn,
    store_of,
    stored,
    text_of,
    transcript,
)
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot
    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message

ONE_TOOL_CALL = {"RUN_TOOL_CALL_BUDGET": "1"}
WRAP_UP = "Out of budget: I read the clock once; the second reading is still to do."
DONE = "Both readings taken: the clock moves."
SPENT = "tool-call budget is spent: 1 tool call used of 1 (RUN_TOOL_CALL_BUDGET)"


def offers_continue(message: Message) -> bool:
    return is_final(message) and ACTION_CONTINUE in buttons(message)


async def spend_the_budget(bot: Bot, llm: LLMock) -> tuple[str, Message]:
    """A mention whose first reply's one tool call spends the budget; its wrap-up turn.
    The thread and its final message, offering Continue."""
    llm.add(Reply(tool_calls=(ToolCall("current_time", {}),)))
    llm.reply(WRAP_UP)
    thread_ts, status = await bot.mention("read the clock twice")
    return thread_ts, await bot.until(status, offers_continue)


async def test_the_final_message_names_the_budget_and_offers_continue(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(**ONE_TOOL_CALL)
    _, final = await spend_the_budget(bot, llm)

    text = text_of(final)
    assert "Blocked" in text and "EXIT-BUDGET" in text
    assert SPENT in text
    assert messages.CONTINUE_OFFER in text
    assert buttons(final) == [ACTION_CONTINUE]
    record = await stored(bot, run_id_of_done(final, bot))
    assert (record.state, record.ended_because, record.resume) == (
        RunState.BLOCKED,
        EndedBecause.BUDGET_EXHAUSTED,
        ResumeState.DECLINED,
    )
    assert await store_of(bot).pending_resumes() == []  # never resumed on its own
    assert len(llm.requests) == 2


async def test_continue_runs_it_on_from_its_checkpoint_with_one_more_budget(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(**ONE_TOOL_CALL)
    thread_ts, final = await spend_the_budget(bot, llm)
    first_id = run_id_of_done(final, bot)
    # The continuation: its one tool call runs (a new budget), then it wraps up again.
    llm.add(Reply(tool_calls=(ToolCall("current_time", {}),)))
    llm.reply(DONE)

    assert await bot.click(final, ACTION_CONTINUE) == 200

    # The message is updated in place: who continued it, and no Continue any more.
    first = await bot.until(final, lambda m: messages.continued(DEFAULT_USER) in text_of(m))
    assert ACTION_CONTINUE not in buttons(first)
    assert SPENT in text_of(first)
    # Rewritten from the store, its small print still says what the request spent.
    assert " · 1 tool call" in text_of(first)
    second = await new_status_message(bot, thread_ts, after=first.ts)
    second = await bot.final(second)
    assert DONE in transcript(bot.slack, thread_ts)

    # From the checkpoint: the earlier conversation, its tool call not redone, and why.
    assert len(llm.requests) == 4
    continued = llm.requests[2].body["messages"]
    before_wrap_up = llm.requests[1].body["messages"][:-1]  # less the wrap-up instruction
    assert continued[: len(before_wrap_up)] == before_wrap_up
    note = resumed_note(EndedBecause.BUDGET_EXHAUSTED)
    assert {"role": "system", "content": note} in continued
    assert any(m.get("tool_calls") for m in continued if m["role"] == "assistant")
    assert "current_time" in offered_tools(llm.requests[2])
    # One more budget: the continuation's tool call ran, and then that budget was spent.
    (result,) = tool_results(llm.requests[3])[-1:]
    assert "not run" not in result
    assert offered_tools(llm.requests[3]) == ["final_report"]
    assert "Blocked" in text_of(second) and SPENT in text_of(second)
    assert ACTION_CONTINUE in buttons(second)  # its own budget spent: it may go on again

    second_id = run_id_of_done(second, bot)
    before, after = await stored(bot, first_id), await stored(bot, second_id)
    assert (before.resume, before.resume_by) == (ResumeState.STARTED, DEFAULT_USER)
    assert (after.continued_from, after.thread, after.requester) == (
        first_id,
        before.thread,
        before.requester,
    )
    assert after.auto_resumes == before.auto_resumes  # a person's, not an automatic resume
    (asked,) = await events(bot, first_id, "resume.continued")
    assert (asked.actor, asked.detail["source"]) == (DEFAULT_USER, "button")
    (started,) = await events(bot, first_id, "run.continued")
    assert (started.detail["continuation"], started.detail["by"]) == (second_id, DEFAULT_USER)
    assert bot.ephemerals_for(DEFAULT_USER, final.channel) == []
    print(f"\n== budget spent, wrapped up, continued ==\n{transcript(bot.slack, thread_ts)}")


async def test_continue_by_someone_not_allowed_changes_nothing(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(**ONE_TOOL_CALL)
    _, final = await spend_the_budget(bot, llm)
    run_id = run_id_of_done(final, bot)

    assert await bot.click(final, ACTION_CONTINUE, user=OTHER_USER) == 200

    (answer,) = await bot.ephemerals(OTHER_USER)
    assert answer == messages.continue_not_allowed(DEFAULT_USER)
    assert "can continue this run" in answer
    record = await stored(bot, run_id)
    assert (record.resume, record.resume_by) == (ResumeState.DECLINED, None)
    assert await store_of(bot).pending_resumes() == []  # nothing will start
    assert await events(bot, run_id, "resume.continued") == []
    assert offers_continue(bot.slack.message(final.channel, final.ts))
    assert len(llm.requests) == 2


async def test_under_stop_policy_anyone_only_the_requester_or_an_admin_may_continue(
    make_bot: BotFactory, llm: LLMock
) -> None:
    """The attack: anyone may stop a run here, and someone presses Continue to spend one
    more budget on the requester's behalf. Refused; an admin's press counts."""
    admin = "U0TPADMIN01"
    bot = await make_bot(**ONE_TOOL_CALL, STOP_POLICY="anyone", ADMIN_USER_IDS=admin)
    thread_ts, final = await spend_the_budget(bot, llm)
    run_id = run_id_of_done(final, bot)

    assert await bot.click(final, ACTION_CONTINUE, user=OTHER_USER) == 200

    (answer,) = await bot.ephemerals(OTHER_USER)
    assert answer == messages.continue_not_allowed(DEFAULT_USER)
    record = await stored(bot, run_id)
    assert (record.resume, record.resume_by) == (ResumeState.DECLINED, None)
    assert await store_of(bot).pending_resumes() == []
    assert await events(bot, run_id, "resume.continued") == []
    assert offers_continue(bot.slack.message(final.channel, final.ts))
    assert len(llm.requests) == 2

    llm.reply(DONE)
    assert await bot.click(final, ACTION_CONTINUE, user=admin) == 200
    second = await new_status_message(bot, thread_ts, after=final.ts)
    await bot.final(second)
    assert (await stored(bot, run_id)).resume_by == admin
    assert bot.ephemerals_for(admin, final.channel) == []


async def test_a_continue_counts_towards_max_runs_per_user(
    make_bot: BotFactory, llm: LLMock
) -> None:
    """With ``MAX_RUNS_PER_USER=1`` and another run of the requester's working, Continue
    is refused with an ephemeral and starts nothing; once that run ends, it continues."""
    bot = await make_bot(**ONE_TOOL_CALL, MAX_RUNS_PER_USER="1")
    thread_ts, final = await spend_the_budget(bot, llm)
    run_id = run_id_of_done(final, bot)
    llm.add(*stalled_answer(60.0, with_tool=False, text=SHORT_TEXT))
    _, working = await bot.mention("and meanwhile, something else")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)

    assert await bot.click(final, ACTION_CONTINUE) == 200

    (answer,) = await bot.ephemerals(DEFAULT_USER)
    assert answer == messages.continue_person_full(DEFAULT_USER, 1)
    record = await stored(bot, run_id)
    assert (record.resume, record.resume_by) == (ResumeState.DECLINED, None)
    assert await store_of(bot).pending_resumes() == []
    assert await events(bot, run_id, "resume.continued") == []
    assert offers_continue(bot.slack.message(final.channel, final.ts))

    assert await bot.click(working, ACTION_ABORT) == 200
    await bot.final(working)
    llm.reply(DONE)
    assert await bot.click(final, ACTION_CONTINUE) == 200
    second = await new_status_message(bot, thread_ts, after=final.ts)
    await bot.final(second)
    assert (await stored(bot, run_id)).resume_by == DEFAULT_USER
    assert len(await bot.ephemerals(DEFAULT_USER)) == 1  # only the refusal


async def test_a_second_press_and_a_redelivered_press_change_nothing(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(**ONE_TOOL_CALL, ADMIN_USER_IDS=OTHER_USER)
    thread_ts, final = await spend_the_budget(bot, llm)
    run_id = run_id_of_done(final, bot)
    llm.reply(DONE)
    press = slack_requests.click_button(final, ACTION_CONTINUE)

    for _ in range(2):  # Slack delivers the same press twice
        response = await bot.post(slack_requests.interaction_request(press, SECRET))
        assert response.status == 200
    second = await new_status_message(bot, thread_ts, after=final.ts)
    await bot.final(second)
    # A second press, by an admin, on the message as their client still showed it.
    assert await bot.click_version(final, ACTION_CONTINUE, user=OTHER_USER) == 200

    (answer,) = await bot.ephemerals(OTHER_USER)
    assert answer == messages.already_continued(DEFAULT_USER)
    assert bot.ephemerals_for(DEFAULT_USER, final.channel) == []  # the repeat: not answered
    assert len(await events(bot, run_id, "resume.continued")) == 1
    assert len(await events(bot, run_id, "run.continued")) == 1
    runs = await store_of(bot).find_runs(thread=(await stored(bot, run_id)).thread)
    assert len(runs) == 2
    assert len(llm.requests) == 3


async def test_continue_after_a_newer_run_took_the_thread_changes_nothing(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(**ONE_TOOL_CALL)
    thread_ts, final = await spend_the_budget(bot, llm)
    run_id = run_id_of_done(final, bot)
    llm.reply(DONE)
    envelope = slack_requests.app_mention(
        f"<@{bot.slack.workspace.bot_user_id}> never mind, just once", thread_ts=thread_ts
    )
    assert await bot.event(envelope) == 200
    newer = await new_status_message(bot, thread_ts, after=final.ts)
    await bot.final(newer)

    assert await bot.click(final, ACTION_CONTINUE) == 200

    (answer,) = await bot.ephemerals(DEFAULT_USER)
    assert answer == messages.CONTINUE_SUPERSEDED
    record = await stored(bot, run_id)
    assert (record.resume, record.resume_by) == (ResumeState.DECLINED, None)
    assert len(llm.requests) == 3


# -- an automatic resume goes on with the request's budget -----------------------------


async def test_a_rate_limited_run_resumes_with_what_its_request_had_spent(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(**FAST, RUN_TOOL_CALL_BUDGET="2")
    # Turn 1 runs one tool call; then a 429 pauses the run; resumed, turn 2 runs the
    # second call, and that is the request's budget: the next turn is the wrap-up.
    _, status = await start_with_one_turn(
        bot,
        llm,
        rate_limited(0.3),
        Reply(tool_calls=(ToolCall("current_time", {}),)),
        Reply(text=WRAP_UP),
    )
    run_id = run_id_of_done(status, bot)

    final = await bot.until(status, lambda m: is_final(m) and "EXIT-BUDGET" in text_of(m))

    assert [r.status for r in llm.requests] == [200, 429, 200, 200]
    assert offered_tools(llm.requests[3]) == ["final_report"]  # not a fresh budget's turn
    results = tool_results(llm.requests[3])
    assert len(results) == 2 and not any("not run" in r for r in results)  # one a leg
    assert "tool-call budget is spent: 2 tool calls used of 2" in text_of(final)
    record = await stored(bot, run_id)
    assert (record.auto_resumes, record.ended_because) == (1, EndedBecause.BUDGET_EXHAUSTED)
    assert record.result is not None
    result = RunResult.from_dict(record.result)
    # The request's spend, both legs; the run's own usage is this leg's.
    assert result.spent is not None and result.spent.tool_calls == 2
    assert result.spent.total_tokens > result.usage.total_tokens > 0


async def test_a_run_resumed_after_a_restart_goes_on_with_its_requests_budget(
    make_bot: BotFactory, llm: LLMock
) -> None:
    first = await make_bot(RUN_TOOL_CALL_BUDGET="2")
    # Turn 1 runs one tool call; turn 2's stream stalls, and the worker restarts.
    thread_ts, status = await start_with_one_turn(
        first, llm, *stalled_answer(30.0, text=SHORT_TEXT)
    )

    def streaming(slack: FakeSlack) -> bool:
        """Turn 2's first words are in Slack: its request is the stalled one, in flight."""
        thread = slack.thread(DEFAULT_CHANNEL, thread_ts)
        return any(m.stream is not None and "Let me" in (m.text or "") for m in thread)

    assert await first.slack.wait_until(streaming, timeout=WAIT_S)
    run_id = run_id_of(status)
    await first.app.shutdown()

    # Restarted: the resumed run's one tool call is the request's second, its last.
    llm.add(Reply(tool_calls=(ToolCall("current_time", {}),)))
    llm.reply(WRAP_UP)
    restarted = await make_bot(RUN_TOOL_CALL_BUDGET="2")
    final = await restarted.until(status, lambda m: is_final(m) and "EXIT-BUDGET" in text_of(m))

    assert len(llm.requests) == 4
    assert offered_tools(llm.requests[3]) == ["final_report"]
    results = tool_results(llm.requests[3])
    assert len(results) == 2 and not any("not run" in r for r in results)
    assert "tool-call budget is spent: 2 tool calls used of 2" in text_of(final)
    resumed = await stored(restarted, run_id)
    assert (resumed.auto_resumes, resumed.ended_because) == (1, EndedBecause.BUDGET_EXHAUSTED)
    (paused,) = await events(restarted, run_id, "resume.scheduled")
    assert paused.detail["ended_because"] == "shutdown"


async def test_a_continuation_from_a_summary_goes_on_with_its_requests_budget(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(RUN_TOOL_CALL_BUDGET="3")
    fill_the_window(llm)  # two tool calls run, then the third page overflows
    thread_ts, first = await bot.mention("find why the nightly backup fails")
    llm.reply(SUMMARY)
    llm.add(Reply(tool_calls=(ToolCall("current_time", {}),)))  # the request's third call
    llm.reply(WRAP_UP)

    first = await bot.until(first, lambda m: messages.RESUME_CONTINUED in text_of(m))
    second = await new_status_message(bot, thread_ts, after=first.ts)
    second = await bot.until(second, lambda m: is_final(m) and "EXIT-BUDGET" in text_of(m))

    assert [r.status for r in llm.requests] == [200, 200, 400, 200, 200, 200]
    assert offered_tools(llm.requests[5]) == ["final_report"]
    assert "tool-call budget is spent: 3 tool calls used of 3" in text_of(second)
    # Its tokens: the first run's, the summary's own request, then its own.
    ended = [await stored(bot, run_id_of_done(m, bot)) for m in (first, second)]
    before, after = (RunResult.from_dict(r.result or {}) for r in ended)
    assert before.spent is not None and after.spent is not None
    summary_tokens = after.spent.total_tokens - before.spent.total_tokens
    assert summary_tokens - after.usage.total_tokens > 0


async def test_one_press_delivered_to_two_workers_at_once_continues_once(
    make_bot: BotFactory, llm: LLMock
) -> None:
    owner = await make_bot(**ONE_TOOL_CALL, WORKER_ID="owner")
    other = await make_bot(**ONE_TOOL_CALL, WORKER_ID="other")
    thread_ts, final = await spend_the_budget(owner, llm)
    run_id = run_id_of_done(final, owner)
    llm.reply(DONE)
    press = slack_requests.click_button(final, ACTION_CONTINUE)

    statuses = await asyncio.gather(
        *(bot.post(slack_requests.interaction_request(press, SECRET)) for bot in (owner, other))
    )

    assert [s.status for s in statuses] == [200, 200]
    second = await new_status_message(owner, thread_ts, after=final.ts)
    await owner.final(second)
    await owner.until(final, lambda m: messages.continued(DEFAULT_USER) in text_of(m))
    assert len(await events(owner, run_id, "resume.continued")) == 1
    assert len(await events(owner, run_id, "run.continued")) == 1
    runs = await store_of(owner).find_runs(thread=(await stored(owner, run_id)).thread)
    assert len(runs) == 2
    assert len(llm.requests) == 3
    assert owner.ephemerals_for(DEFAULT_USER, final.channel) == []


async def test_a_workspace_owner_may_continue_as_an_admin_may(
    make_bot: BotFactory, llm: LLMock
) -> None:
    """A workspace's admins and owners administer its runs (besides ``ADMIN_USER_IDS``):
    its owner's Continue counts; someone else's still does not."""
    owner = "U0TPOWNER01"
    bot = await make_bot(**ONE_TOOL_CALL)
    bot.slack.state.add_person(owner, owner=True)
    thread_ts, final = await spend_the_budget(bot, llm)
    run_id = run_id_of_done(final, bot)

    assert await bot.click(final, ACTION_CONTINUE, user=OTHER_USER) == 200
    (answer,) = await bot.ephemerals(OTHER_USER)
    assert answer == messages.continue_not_allowed(DEFAULT_USER)

    llm.reply(DONE)
    assert await bot.click(final, ACTION_CONTINUE, user=owner) == 200
    second = await new_status_message(bot, thread_ts, after=final.ts)
    await bot.final(second)
    assert (await stored(bot, run_id)).resume_by == owner
    assert bot.ephemerals_for(owner, final.channel) == []
