"""One sub-agent stopped, one aborted and one steered from a worker that does not run
them (docs/stopping.md, Sub-agents people can reach), on SQLite and PostgreSQL.

Worker ``a`` runs a parent with three sub-agents, each stalled in its first step; every
control is taken through worker ``b``, which commits it under the sub-agent's own run id
before the ack; ``a`` learns of each through its wake-up (NOTIFY on PostgreSQL, its poll
on SQLite) and applies it to that sub-agent alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from agent_core import RunState, StopReason
from bot.handlers.sub_agent_steer import CALLBACK_STEER, STEER_INPUT
from bot.steering.guidance import DELIVERED
from bot.views.status import ACTION_SUB_AGENT
from tests.agent_core.helpers import offered_tools
from tests.bot.harness import block_text, run_id_of
from tests.bot.stopping.test_sub_agent_controls import (
    TASKS,
    requests_of,
    script_three_children,
    sub_agents,
    tool_results,
)
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_USER
from tests.system.workers import until

if TYPE_CHECKING:
    from llmock.journal import Journal
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.fakes.slack_api import FakeSlack
    from tests.system.workers import Cluster

pytestmark = pytest.mark.slow

GUIDANCE = "Only look at the main branch."


async def test_sub_agent_controls_from_a_worker_that_does_not_run_them(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock, slack: FakeSlack
) -> None:
    a, b = await cluster.start("a", "b")
    script_three_children(llm, answers=2)
    _, status = await cluster.mention(a, "audit the project")
    run_id = run_id_of(status)
    shown = await cluster.until_message(status, lambda m: len(sub_agents(m)) == len(TASKS))
    await until(lambda: journal.in_flight == len(TASKS), what="three sub-agents streaming")
    children = sub_agents(shown)
    stopped, aborted, steered = (children[t] for t in TASKS)

    for verb, child in (("stop", stopped), ("abort", aborted)):
        message = cluster.current(status)
        payload = slack_requests.choose_option(message, ACTION_SUB_AGENT, f"{verb}:{child}")
        assert await b.click_payload(payload) == 200
    message = cluster.current(status)
    payload = slack_requests.choose_option(message, ACTION_SUB_AGENT, f"steer:{steered}")
    assert await b.click_payload(payload) == 200
    (modal,) = await slack.wait_until(lambda s: s.state.modals(), timeout=10)
    assert modal["callback_id"] == CALLBACK_STEER
    submission = slack_requests.view_submission(modal, {STEER_INPUT: {STEER_INPUT: GUIDANCE}})
    assert await b.click_payload(submission) == 200
    final = await cluster.final(status)

    records = requests_of(journal.records())
    (cut,) = records[TASKS[1]]
    assert not cut.completed  # a closed the aborted one's stream
    _, stopped_final = records[TASKS[0]]
    assert offered_tools(stopped_final) == ["final_report"]
    _, steered_next = records[TASKS[2]]
    users = [str(m["content"]) for m in steered_next.body["messages"] if m["role"] == "user"]
    assert any(GUIDANCE in text for text in users)
    parent_turns = records[None]
    for request in [*parent_turns, *records[TASKS[0]], *records[TASKS[1]]]:
        assert GUIDANCE not in str(request.body["messages"])
    reports = tool_results(parent_turns[1])
    assert reports[0].startswith(f"Stopped by <@{DEFAULT_USER}>")
    assert reports[1].startswith(f"Sub-agent aborted by <@{DEFAULT_USER}>")
    assert "Parent summary" in block_text(final)

    for child, verdict in ((stopped, "stop"), (aborted, "abort")):
        assert b.logged("click.handled", run_id=child, local=False, verdict=verdict)
        assert a.logged("stop.delivered", run_id=child, kind=verdict)
    for child, reason in ((stopped, StopReason.STOP), (aborted, StopReason.ABORT)):
        record = await store.get_run(child)
        assert record is not None
        assert (record.parent_id, record.state, record.stop_reason) == (
            run_id,
            RunState.USERINTERLUDE,
            reason,
        )
    assert b.logged("guidance.committed", run_id=steered, local=False)
    assert status.thread_ts is not None
    note = next(m for m in slack.thread(status.channel, status.thread_ts) if GUIDANCE in m.text)
    marked = await slack.wait_until(
        lambda s: DELIVERED in s.message(note.channel, note.ts).reactions, timeout=10
    )
    assert marked
