"""Sub-agents' rows and the reconciler (docs/operations.md, Leases and the reconciler).

A sub-agent (a ``delegate`` call's child run) is stored with its parent, in its parent's
thread, and holds no lease of its own: its parent's worker runs it. So when the parent's
worker is gone, the reconciler ends the parent's live children (and theirs) with it;
a child is never resumed on its own (its parent, resumed, delegates again); and a child,
which never had a Slack message, is not looked for in the thread. A real SQLite store
and the fake Slack.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agent_core import LIVE_STATES, Outcome, RunRecord, RunState, StopReason, ThreadKey
from agent_core.values.clock import utcnow
from bot.workers.reconciler import FINAL_GRACE_S, Reconciler
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER

if TYPE_CHECKING:
    from agent_core import Checkpoint
    from agent_core.ports import Store
    from bot.slack_api.surface import Workspaces
    from tests.fakes.slack_api import FakeSlack

THREAD_TS = "1700000000.000100"


class Resumes:
    def __init__(self) -> None:
        self.runs: list[str] = []

    async def __call__(self, record: RunRecord, checkpoint: Checkpoint | None) -> None:
        self.runs.append(record.id)


def reconciler(store: Store, workspaces: Workspaces, resumes: Resumes) -> Reconciler:
    return Reconciler(
        store,
        workspaces,
        worker_id="worker-b",
        lease_ttl_s=3.0,
        resume=resumes,
        is_local=lambda _: False,
    )


def thread_of(slack: FakeSlack) -> ThreadKey:
    return ThreadKey(slack.workspace.team_id, DEFAULT_CHANNEL, THREAD_TS)


async def a_family(store: Store, slack: FakeSlack, **parent: Any) -> None:
    """A run of a worker that is gone (its lease ran out), with two live sub-agents, a
    grandchild, and a sub-agent that had already ended; and a status message."""
    thread = thread_of(slack)
    slack.seed_message(DEFAULT_CHANNEL, "audit the repo", ts=THREAD_TS)
    status_ts = slack.seed_message(
        DEFAULT_CHANNEL, "Working: turn 2", user=slack.workspace.bot_user_id, thread_ts=THREAD_TS
    )
    past = utcnow() - timedelta(seconds=10)
    rows = [
        RunRecord(
            id="parent",
            thread=thread,
            requester=DEFAULT_USER,
            task="audit the repo",
            state=RunState.RUNNING,
            owner="worker-a",
            lease_expires_at=past,
            status_ts=status_ts,
            **parent,
        ),
        RunRecord(
            id="child-1",
            thread=thread,
            requester=DEFAULT_USER,
            task="count the files",
            state=RunState.RUNNING,
            parent_id="parent",
        ),
        RunRecord(
            id="child-2",
            thread=thread,
            requester=DEFAULT_USER,
            task="read the wiki",
            state=RunState.FINISHED,
            outcome=Outcome.FINISHED,
            parent_id="parent",
        ),
        RunRecord(
            id="child-3",
            thread=thread,
            requester=DEFAULT_USER,
            task="check the CI",
            state=RunState.STOPPING,
            parent_id="parent",
        ),
        RunRecord(
            id="grandchild",
            thread=thread,
            requester=DEFAULT_USER,
            task="open the logs",
            state=RunState.RUNNING,
            parent_id="child-3",
        ),
    ]
    for row in rows:
        await store.create_run(row)


async def states(store: Store, *run_ids: str) -> dict[str, RunState]:
    found = {}
    for run_id in run_ids:
        record = await store.get_run(run_id)
        assert record is not None
        found[run_id] = record.state
    return found


async def test_an_orphaned_run_ends_with_its_live_sub_agents_and_only_it_resumes(
    store: Store, workspaces: Workspaces, slack: FakeSlack
) -> None:
    await a_family(store, slack)
    resumes = Resumes()

    report = await reconciler(store, workspaces, resumes).run_once()

    assert report.orphans_ended == 1
    assert resumes.runs == ["parent"]  # resumed; it delegates again from its checkpoint
    assert await states(store, "child-1", "child-2", "child-3", "grandchild") == {
        "child-1": RunState.BLOCKED,
        "child-2": RunState.FINISHED,  # had ended: left as it was
        "child-3": RunState.BLOCKED,
        "grandchild": RunState.BLOCKED,
    }
    assert await store.find_runs(states=LIVE_STATES, top_level=False) == []

    # Their rows stay blocked: no later pass resumes a sub-agent on its own.
    await reconciler(store, workspaces, resumes).run_once()
    assert resumes.runs == ["parent"]


async def test_a_person_s_stop_of_the_orphaned_run_is_its_sub_agents_ending_too(
    store: Store, workspaces: Workspaces, slack: FakeSlack
) -> None:
    await a_family(store, slack)
    await store.add_stop_request("parent", thread_of(slack), StopReason.STOP, DEFAULT_USER)
    resumes = Resumes()

    await reconciler(store, workspaces, resumes).run_once()

    assert resumes.runs == []  # a person stopped it
    for run_id in ("parent", "child-1", "child-3", "grandchild"):
        record = await store.get_run(run_id)
        assert record is not None
        assert (record.state, record.stop_reason, record.stopped_by) == (
            RunState.USERINTERLUDE,
            StopReason.STOP,
            DEFAULT_USER,
        ), run_id


async def test_a_live_sub_agent_whose_run_has_ended_is_ended(
    store: Store, workspaces: Workspaces, slack: FakeSlack
) -> None:
    # The parent ended (recorded), but a child's own terminal write was lost.
    await a_family(store, slack)
    await store.set_state(
        "parent",
        RunState.FINISHED,
        expected=LIVE_STATES,
        outcome=Outcome.FINISHED,
        owner=None,
        lease_expires_at=None,
        final_posted_at=utcnow(),
    )

    await reconciler(store, workspaces, Resumes()).run_once()

    assert await store.find_runs(states=LIVE_STATES, thread=thread_of(slack)) == []


async def test_sub_agents_have_no_slack_message_to_repair_and_never_crowd_out_a_run_s(
    store: Store, workspaces: Workspaces, slack: FakeSlack
) -> None:
    thread = thread_of(slack)
    slack.seed_message(DEFAULT_CHANNEL, "audit the repo", ts=THREAD_TS)
    # Many ended sub-agents (no Slack message of their own, never posted), older than a
    # run whose final never reached Slack.
    for i in range(120):
        await store.create_run(
            RunRecord(
                id=f"child-{i:03}",
                thread=thread,
                requester=DEFAULT_USER,
                task="count",
                state=RunState.FINISHED,
                outcome=Outcome.FINISHED,
                parent_id="earlier",
            )
        )
    status_ts = slack.seed_message(
        DEFAULT_CHANNEL, "Working: turn 2", user=slack.workspace.bot_user_id, thread_ts=THREAD_TS
    )
    await store.create_run(
        RunRecord(
            id="parent",
            thread=thread,
            requester=DEFAULT_USER,
            task="audit the repo",
            state=RunState.FINISHED,
            outcome=Outcome.FINISHED,
            status_ts=status_ts,
        )
    )
    later = utcnow() + timedelta(seconds=FINAL_GRACE_S + 1)

    report = await reconciler(store, workspaces, Resumes()).run_once(now=later)

    assert report.finals_reposted == 1
    assert [c.args["ts"] for c in slack.calls("chat.update")] == [status_ts]
    assert slack.calls("conversations.replies") == []
