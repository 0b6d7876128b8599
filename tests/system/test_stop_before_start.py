"""A Stop committed before the owner has started the run: the run ends without calling
the model (docs/stopping.md: "if no step has completed yet, the run ends at once").

The owner is held up at its first Slack post (a 429 with Retry-After), while the run is
already registered and leased to it, still ``queued``. The Stop lands on the other
worker, which commits it; the owner must find it when it starts (its stop scan runs
before the first model call), not miss it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from agent_core import LIVE_STATES, RunState, ThreadKey
from bot import messages
from tests.bot.harness import ACTION_STOP, block_text
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER, DEFAULT_WORKSPACE
from tests.system.workers import until_async

if TYPE_CHECKING:
    from llmock.journal import Journal
    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from agent_core.values.records import RunRecord
    from tests.system.workers import Cluster

pytestmark = pytest.mark.slow

POST_DELAY_S = 2


async def test_a_stop_committed_while_the_run_is_queued_ends_it_without_the_model(
    cluster: Cluster, store: Store, journal: Journal, llm: LLMock
) -> None:
    a, b = await cluster.start("a", "b")
    llm.reply("This answer must never be asked for.")
    cluster.slack.fail_next("chat.postMessage", status=429, retry_after=POST_DELAY_S)
    envelope = slack_requests.app_mention(f"<@{DEFAULT_WORKSPACE.bot_user_id}> check the time")
    thread_ts = envelope["event"]["ts"]
    assert await a.event(envelope) == 200

    async def queued() -> RunRecord | None:
        thread = ThreadKey(DEFAULT_WORKSPACE.team_id, DEFAULT_CHANNEL, thread_ts)
        runs = await store.find_runs(states=LIVE_STATES, thread=thread)
        return runs[0] if runs else None

    run = await until_async(queued, what="a to register the run")
    # The Stop button of the run, as the App Home lists it: there is no status message
    # to press it on yet.
    click = slack_requests.button_click(
        action_id=ACTION_STOP, value=run.id, message_ts=thread_ts, thread_ts=thread_ts
    )
    assert await b.click_payload(click) == 200
    stored = await store.get_run(run.id)
    assert stored is not None
    assert (stored.state, stored.owner, stored.status_ts) == (RunState.QUEUED, "a", None)
    assert [r.kind for r in await store.pending_stop_requests([run.id])] == ["stop"]

    status = await cluster.status_message(DEFAULT_CHANNEL, thread_ts)
    final = await cluster.final(status)

    text = block_text(final)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in text
    assert "the model was not called" in text
    assert journal.records() == [] and journal.in_flight == 0
    assert a.logged("stop.delivered", run_id=run.id, kind="stop")
    assert b.logged("click.handled", run_id=run.id, verdict="stop", local=False)
    assert not a.logged("turn.started", run_id=run.id)
    assert messages.RUN_NOT_FOUND not in [e.text for e in cluster.slack.ephemerals(DEFAULT_CHANNEL)]
    ended = await store.get_run(run.id)
    assert ended is not None
    assert (ended.state, ended.stopped_by) == (RunState.USERINTERLUDE, DEFAULT_USER)
