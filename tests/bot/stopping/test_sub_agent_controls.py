"""Sub-agents people can reach: each live sub-agent on its parent's status message, with
Stop, Abort and Steer… of its own (docs/stopping.md, Sub-agents people can reach).

The app runs for real against the fake Slack and llmock. One run delegates three tasks;
each sub-agent streams a little of its first step, then stalls, and meanwhile a person
picks an option in that sub-agent's menu. llmock answers in arrival order, so each
sub-agent's requests are told apart by their task.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from llmock.scenarios import Reply, StreamFault, ToolCall

from agent_core import AuditEvent, ExitCode, RunState, StopReason
from bot import messages
from bot.handlers.sub_agent_steer import CALLBACK_STEER, STEER_INPUT
from bot.views.home import ACTION_HOME_ABORT, ACTION_HOME_STEER, ACTION_HOME_STOP
from bot.views.status import ACTION_SUB_AGENT, SUB_AGENT_BLOCK_PREFIX
from tests.agent_core.helpers import offered_tools
from tests.bot.harness import SECRET, WAIT_S, block_text, run_id_of
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_USER
from tests.system.workers import until

if TYPE_CHECKING:
    from llmock.journal import Journal, RequestRecord
    from llmock.pytest_plugin import LLMock
    from llmock.testing import LLMockServer

    from tests.bot.harness import Bot
    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_messages import Message
    from tests.fakes.slack_workspace import Json

LONG_TEXT = " ".join(f"token{i}" for i in range(40))
TASKS = ("Count the open issues", "Read the release notes", "Check the CI")
STALL_S = 3.0
"""Each sub-agent's first step stalls this long: the clicks land in it."""
OTHER = "U0TPOTHER01"
"""Someone in the channel who did not start the run and is no admin."""


def script_three_children(llm: LLMock, answers: int) -> None:
    """The parent's turn that delegates the three tasks; each child's first step (text,
    a stall, then a tool call); ``answers`` plain answers for the children's next turns
    (a final turn after a Stop, or a normal next turn: none after an Abort); the
    parent's answer."""
    calls = tuple(ToolCall("delegate", {"task": t, "tools": ["current_time"]}) for t in TASKS)
    llm.add(Reply(tool_calls=calls), StreamFault("stall", after_chunks=0, stall_seconds=0))
    for _ in TASKS:
        llm.add(
            Reply(text=LONG_TEXT, tool_calls=(ToolCall("current_time", {}),)),
            StreamFault("stall", after_chunks=3, stall_seconds=STALL_S),
        )
    llm.reply("Sub-agent summary.", times=answers)
    llm.reply("Parent summary: went on with what the sub-agents reported.")


def sub_agents(message: Message) -> dict[str, str]:
    """Each live sub-agent's task (as shown) to its run id, from its section."""
    found: dict[str, str] = {}
    for block in message.blocks or []:
        block_id = str(block.get("block_id", ""))
        if not block_id.startswith(SUB_AGENT_BLOCK_PREFIX):
            continue
        text = str(block.get("text", {}).get("text", ""))
        task = next((t for t in TASKS if t in text), None)
        if task is not None:
            found[task] = block_id.removeprefix(SUB_AGENT_BLOCK_PREFIX)
    return found


async def three_stalled(bot: Bot, status: Message, journal: Journal) -> dict[str, str]:
    """Wait until the three sub-agents show on the status message and all three are
    in their stalled first request; their run ids by task."""
    shown = await bot.until(status, lambda m: len(sub_agents(m)) == len(TASKS))
    await until(lambda: journal.in_flight == len(TASKS), what="three sub-agents streaming")
    return sub_agents(shown)


def task_of(record: RequestRecord) -> str | None:
    users = [m["content"] for m in record.body["messages"] if m["role"] == "user"]
    return next((t for t in TASKS if t in users), None)


def requests_of(records: list[RequestRecord]) -> dict[str | None, list[RequestRecord]]:
    found: dict[str | None, list[RequestRecord]] = {}
    for record in records:
        found.setdefault(task_of(record), []).append(record)
    return found


def tool_results(record: RequestRecord) -> list[str]:
    return [str(m["content"]) for m in record.body["messages"] if m["role"] == "tool"]


async def test_stop_one_sub_agent_abort_another_and_the_parent_goes_on(
    bot: Bot, llm: LLMock, llmock_server: LLMockServer
) -> None:
    journal = llmock_server.state.journal
    script_three_children(llm, answers=2)
    _, status = await bot.mention("audit the project")
    run_id = run_id_of(status)
    children = await three_stalled(bot, status, journal)
    stopped, aborted, untouched = (children[t] for t in TASKS)

    assert await bot.choose(status, ACTION_SUB_AGENT, f"stop:{stopped}") == 200
    shown = await bot.until(status, lambda m: f"stop:{stopped}" not in str(m.blocks))
    assert f"abort:{stopped}" in str(shown.blocks)  # it is stopping: only Abort left
    assert "stopping: finishing this step, then its report" in block_text(shown)
    assert f"stop:{untouched}" in str(shown.blocks)  # its siblings are untouched
    assert await bot.choose(status, ACTION_SUB_AGENT, f"abort:{aborted}") == 200
    final = await bot.final(status)

    records = requests_of(journal.records())
    # The aborted one: its stream was closed, and it asked nothing more.
    (cut,) = records[TASKS[1]]
    assert not cut.completed
    # The stopped one: its step finished, then one final turn offering only final_report.
    first, last = records[TASKS[0]]
    assert first.completed
    assert offered_tools(last) == ["final_report"]
    # The untouched one: a normal next turn, its tools still offered.
    _, next_turn = records[TASKS[2]]
    assert "current_time" in offered_tools(next_turn)
    # The parent went on with the three reports.
    parent_turns = records[None]
    assert len(parent_turns) == 2
    reports = tool_results(parent_turns[1])
    assert reports[0].startswith(f"Stopped by <@{DEFAULT_USER}>")
    assert "Sub-agent summary." in reports[0]
    assert reports[1].startswith(f"Sub-agent aborted by <@{DEFAULT_USER}>")
    assert not reports[2].startswith(("Stopped by", "Sub-agent aborted"))

    text = block_text(final)
    assert "Parent summary: went on with what the sub-agents reported." in text
    assert f"Count the open issues · User interlude: stopped by <@{DEFAULT_USER}>" in text
    assert f"Read the release notes · User interlude: aborted by <@{DEFAULT_USER}>" in text
    assert "Check the CI · Finished" in text
    assert bot.app.ctx is not None
    store = bot.app.ctx.store
    parent = await store.get_run(run_id)
    assert parent is not None and parent.exit_code is ExitCode.FINAL_ANSWER
    for child_id, reason in ((stopped, StopReason.STOP), (aborted, StopReason.ABORT)):
        record = await store.get_run(child_id)
        assert record is not None
        assert (record.parent_id, record.state, record.stop_reason) == (
            run_id,
            RunState.USERINTERLUDE,
            reason,
        )
        events: list[AuditEvent] = await store.events_for(child_id)
        asked = [e for e in events if e.kind == f"{reason.value}.requested"]
        assert [(e.actor, e.detail["sub_agent_of"]) for e in asked] == [(DEFAULT_USER, run_id)]


async def test_who_may_not_stop_the_run_may_not_stop_its_sub_agent_and_a_stale_menu_is_told(
    bot: Bot, llm: LLMock, llmock_server: LLMockServer
) -> None:
    journal = llmock_server.state.journal
    script_three_children(llm, answers=3)
    _, status = await bot.mention("audit the project")
    children = await three_stalled(bot, status, journal)
    running = bot.slack.message(status.channel, status.ts)  # still shows every menu

    first = children[TASKS[0]]
    assert await bot.choose(status, ACTION_SUB_AGENT, f"abort:{first}", user=OTHER) == 200
    (refusal,) = await bot.ephemerals(OTHER)
    assert refusal == messages.not_allowed("requester", DEFAULT_USER)
    final = await bot.final(status)  # nobody stopped anything: all three finished
    assert "User interlude" not in block_text(final)

    # A menu left on an older render, chosen after its sub-agent ended.
    assert await bot.choose_on(running, ACTION_SUB_AGENT, f"stop:{children[TASKS[1]]}") == 200
    (stale,) = await bot.ephemerals(DEFAULT_USER)
    assert stale == messages.SUB_AGENT_NOT_LIVE
    assert await bot.choose_on(running, ACTION_SUB_AGENT, f"steer:{children[TASKS[2]]}") == 200
    replies = await bot.ephemerals(DEFAULT_USER, count=2)
    assert replies[1] == messages.SUB_AGENT_NOT_LIVE
    assert bot.slack.state.modals() == []  # no modal for a sub-agent that ended
    assert bot.slack.message(final.channel, final.ts).history == final.history


async def steer(bot: Bot, status: Message, child_id: str, text: str, *, user: str) -> None:
    """Steer… in the sub-agent's menu, then its modal submitted with ``text``."""
    opened = len(bot.slack.state.modals())
    assert await bot.choose(status, ACTION_SUB_AGENT, f"steer:{child_id}", user=user) == 200
    modals = await bot.slack.wait_until(lambda s: len(s.state.modals()) > opened, timeout=WAIT_S)
    assert modals
    view = bot.slack.state.modals()[-1]
    assert view["callback_id"] == CALLBACK_STEER
    response = await bot.submit(view, {STEER_INPUT: {STEER_INPUT: text}}, user=user)
    assert response.status == 200


def posted(bot: Bot, status: Message, words: str) -> Message | None:
    assert status.thread_ts is not None
    found = [m for m in bot.slack.thread(status.channel, status.thread_ts) if words in m.text]
    return found[0] if found else None


async def test_steer_one_sub_agent_and_only_its_next_request_carries_it(
    bot: Bot, llm: LLMock, llmock_server: LLMockServer
) -> None:
    journal = llmock_server.state.journal
    script_three_children(llm, answers=3)
    _, status = await bot.mention("audit the project")
    run_id = run_id_of(status)
    children = await three_stalled(bot, status, journal)
    guided = children[TASKS[2]]

    await steer(bot, status, guided, "Only look at the main branch.", user=DEFAULT_USER)
    note = posted(bot, status, "Only look at the main branch.")
    assert note is not None
    said = "sub-agent «Check the CI»: Only look at the main branch."
    assert note.text == f"<@{DEFAULT_USER}> → {said}"
    assert bot.app.ctx is not None
    stored = await bot.app.ctx.store.pending_guidance([guided])
    assert [g.text for g in stored] == ["Only look at the main branch."]  # before the ack
    await bot.final(status)
    delivered = await bot.slack.wait_until(
        lambda s: (m := posted(bot, status, "main branch")) and "white_check_mark" in m.reactions,
        timeout=WAIT_S,
    )
    assert delivered

    records = requests_of(journal.records())
    _, guided_next = records[TASKS[2]]
    users = [str(m["content"]) for m in guided_next.body["messages"] if m["role"] == "user"]
    assert any("Only look at the main branch." in text for text in users)
    others = [r for task, rs in records.items() if task != TASKS[2] for r in rs]
    assert len(others) == 2 + 2 + 2  # the parent's two turns, the two siblings' two each
    for record in others:
        assert "main branch" not in json.dumps(record.body["messages"])
    events = await bot.app.ctx.store.events_for(guided)
    queued = [e for e in events if e.kind == "guidance.queued"]
    assert [(e.actor, e.detail["sub_agent_of"]) for e in queued] == [(DEFAULT_USER, run_id)]


async def test_steer_by_someone_the_policy_does_not_allow_is_refused(
    bot: Bot, llm: LLMock, llmock_server: LLMockServer
) -> None:
    journal = llmock_server.state.journal
    script_three_children(llm, answers=3)
    _, status = await bot.mention("audit the project")
    children = await three_stalled(bot, status, journal)

    choice = f"steer:{children[TASKS[0]]}"
    assert await bot.choose(status, ACTION_SUB_AGENT, choice, user=OTHER) == 200
    (refusal,) = await bot.ephemerals(OTHER)
    assert refusal == messages.guidance_not_allowed("requester", DEFAULT_USER)
    assert bot.slack.state.modals() == []
    await bot.final(status)
    assert bot.app.ctx is not None
    for child_id in children.values():
        assert await bot.app.ctx.store.pending_guidance([child_id]) == []


async def test_home_lists_the_live_sub_agents_under_their_parent_with_their_controls(
    bot: Bot, llm: LLMock, llmock_server: LLMockServer
) -> None:
    journal = llmock_server.state.journal
    script_three_children(llm, answers=3)
    _, status = await bot.mention("audit the project")
    run_id = run_id_of(status)
    children = await three_stalled(bot, status, journal)
    assert await bot.event(slack_requests.app_home_opened(user=DEFAULT_USER)) == 200

    def listed(slack: FakeSlack) -> Json | None:
        view = slack.state.home_view(DEFAULT_USER)
        return view if view is not None and "Sub-agent:" in json.dumps(view) else None

    view = await bot.slack.wait_until(listed, timeout=WAIT_S)
    assert view is not None
    texts = [str(b.get("text", {}).get("text", "")) for b in view["blocks"]]
    parent_at = next(i for i, t in enumerate(texts) if "audit the project" in t)
    under = [t for t in texts[parent_at + 1 :] if "Sub-agent:" in t]
    assert [next(task for task in TASKS if task in t) for t in under] == list(TASKS)
    buttons = [
        (e["action_id"], e["value"])
        for b in view["blocks"]
        for e in b.get("elements", [])
        if isinstance(e, dict) and e.get("type") == "button"
    ]
    for child_id in children.values():
        for action in (ACTION_HOME_STOP, ACTION_HOME_ABORT, ACTION_HOME_STEER):
            assert (action, child_id) in buttons
    assert (ACTION_HOME_STOP, run_id) in buttons  # the parent's own, as before

    # Stop one sub-agent from Home: it alone reports early; the parent goes on.
    stopped = children[TASKS[0]]
    payload = slack_requests.home_click(view, ACTION_HOME_STOP, value=stopped)
    response = await bot.post(slack_requests.interaction_request(payload, SECRET))
    assert response.status == 200
    final = await bot.final(status)
    text = block_text(final)
    assert f"Count the open issues · User interlude: stopped by <@{DEFAULT_USER}>" in text
    assert "Read the release notes · Finished" in text
    assert "Check the CI · Finished" in text
    assert "Outcome*\nFinished" in text
