"""A Stop pressed in App Home ends a run that another worker owns.

App Home is published by whichever worker Slack handed the ``app_home_opened`` event to,
and its buttons land on any worker: here worker ``b`` lists and stops a run that worker
``a`` runs. The stop goes through the stop service and the database, like a click on
the status message; ``a`` honours it with a final turn. ``b`` learns from the database
that the run changed and publishes the Home tab again, without being told by ``a``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from agent_core import RunState
from bot import messages
from bot.views.home import ACTION_HOME_STOP
from tests.bot.harness import block_text, run_id_of, stalled_answer
from tests.fakes import slack_requests
from tests.fakes.slack_workspace import DEFAULT_USER
from tests.system.workers import WAIT_S

if TYPE_CHECKING:
    from collections.abc import Callable

    from llmock.pytest_plugin import LLMock

    from agent_core.ports import Store
    from tests.fakes.slack_api import FakeSlack
    from tests.fakes.slack_workspace import Json
    from tests.system.workers import Cluster

pytestmark = pytest.mark.slow

STALL_S = 3.0
"""Long enough to open App Home and press Stop while the model stalls."""


async def home(slack: FakeSlack, predicate: Callable[[str], bool]) -> Json:
    """The requester's Home tab, once its blocks' text satisfies ``predicate``."""

    def check(fake: FakeSlack) -> Json | None:
        view = fake.state.home_view(DEFAULT_USER)
        if view is None or not predicate(json.dumps(view["blocks"], ensure_ascii=False)):
            return None
        return view

    view = await slack.wait_until(check, timeout=WAIT_S)
    assert view is not None
    return view


async def test_stop_in_app_home_ends_a_run_owned_by_another_worker(
    cluster: Cluster, store: Store, llm: LLMock
) -> None:
    a, b = await cluster.start("a", "b")
    llm.add(*stalled_answer(STALL_S))
    llm.reply("Stopped early: nothing was checked yet.")
    _, status = await cluster.mention(a, "check the time")
    run_id = run_id_of(status)
    await cluster.slack.wait_for_call("chat.startStream", timeout=WAIT_S)  # now stalled

    assert await b.event(slack_requests.app_home_opened()) == 200
    view = await home(cluster.slack, lambda text: ACTION_HOME_STOP in text)
    payload = slack_requests.home_click(view, ACTION_HOME_STOP, value=run_id)
    assert await b.click_payload(payload) == 200

    final = await cluster.final(status)
    assert f"User interlude: stopped by <@{DEFAULT_USER}>" in block_text(final)
    assert "Stopped early: nothing was checked yet." in block_text(final)
    # b committed it, a (the owner) honoured it and wrote the ending.
    assert b.logged("home.click_handled", run_id=run_id, local=False, verdict="stop")
    await a.wait_log("stop.delivered", run_id=run_id, kind="stop")
    record = await store.get_run(run_id)
    assert record is not None
    assert (record.state, record.owner, record.stopped_by) == (
        RunState.USERINTERLUDE,
        "a",
        DEFAULT_USER,
    )
    # b's Home tab said the Stop was taken, then followed the run to its end.
    assert messages.STOP_ACCEPTED in json.dumps(
        [call.args["view"] for call in cluster.slack.calls("views.publish")],
        ensure_ascii=False,
    )
    ended = await home(cluster.slack, lambda text: "User interlude: stopped by" in text)
    assert ACTION_HOME_STOP not in json.dumps(ended)
    assert all(call.ok for call in cluster.slack.calls("views.publish"))
