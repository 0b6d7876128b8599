"""`SlackRateBudget` keeps a workspace's Web API calls within Slack's limits, without losing
terminal messages and without posting twice.

Every test talks to `FakeSlack` over real HTTP through a real `AsyncWebClient`. Rates are
raised through `tiers` so the suite runs in seconds; the waits left are Slack's own
`Retry-After` (1 s, the smallest it sends) inside the code under test. Tests wait on the
fake's recordings, never on the clock.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient
from structlog.testing import capture_logs

from bot.errors import (
    BudgetNotRunning,
    SlackError,
    SlackRateLimited,
    SlackRefused,
    SlackUnavailable,
)
from bot.slack_api import rate_budget as slack_budget
from bot.slack_api.identity import AppIdentity
from bot.slack_api.rate_budget import LIMITS_PER_MINUTE, WINDOW_SHARE, SlackRateBudget, TokenBucket
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_USER, DEFAULT_WORKSPACE

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from tests.fakes.slack_api import ApiCall

BOT_TOKEN = "xoxb-fake-bot-token"
TEAM = DEFAULT_WORKSPACE.team_id
BOT = DEFAULT_WORKSPACE.bot_user_id
CHANNEL = DEFAULT_CHANNEL
ME = AppIdentity(user_id=BOT, bot_id=DEFAULT_WORKSPACE.bot_id, team_id=TEAM)
# The fake stamps arrival times; the budget times sends. Calls to a local server arrive a
# few ms after they are sent, and timers may fire a hair early.
ARRIVAL_JITTER_S = 0.02
TIMER_SLACK_S = 0.005


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
async def client(slack: FakeSlack) -> AsyncIterator[AsyncWebClient]:
    # One shared HTTP session, as the app has: no new connection per call.
    async with aiohttp.ClientSession() as session:
        yield AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url, session=session)


@asynccontextmanager
async def running(
    client: AsyncWebClient, tiers: Mapping[str, float] | None = None
) -> AsyncIterator[SlackRateBudget]:
    budget = SlackRateBudget(client, team_id=TEAM, me=ME, tiers=tiers)
    await budget.start()
    try:
        yield budget
    finally:
        await budget.close()


def blocks(text: str) -> list[dict[str, Any]]:
    return [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]


def status_message(slack: FakeSlack, channel: str = CHANNEL) -> str:
    """A status message the bot posted before the test; returns its ts."""
    return slack.seed_message(channel, "starting", user=BOT)


def update_calls(slack: FakeSlack, ts: str | None = None) -> list[ApiCall]:
    calls = slack.calls("chat.update")
    return [call for call in calls if ts is None or call.args.get("ts") == ts]


def updates(slack: FakeSlack, ts: str, channel: str = CHANNEL) -> list[str]:
    """The texts a message was updated to, in order."""
    return [revision.text for revision in slack.message(channel, ts).updates]


async def drain(budget: SlackRateBudget, slack: FakeSlack, per_minute: float) -> None:
    """Spend chat.update's saved burst on other messages, so the bucket is empty."""
    burst = int(TokenBucket(per_minute).capacity)
    before = len(update_calls(slack))
    for n in range(burst):
        budget.update_progress(CHANNEL, status_message(slack), text=f"other {n}", blocks=[])
    await slack.wait_until(lambda s: len(update_calls(s)) == before + burst)


def assert_within_budget(times: list[float], per_minute: float) -> None:
    """No stretch of calls went faster than the bucket allows: burst + rate x duration."""
    bucket = TokenBucket(per_minute)
    for i, first in enumerate(times):
        for j in range(i, len(times)):
            allowed = bucket.capacity + bucket.rate * (times[j] - first + ARRIVAL_JITTER_S)
            assert j - i + 1 <= allowed, f"calls {i}..{j} in {times[j] - first:.3f}s"


# -- the bucket ------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_refills_at_its_rate_and_a_429_pause_stops_it() -> None:
    clock = FakeClock()
    bucket = TokenBucket(60.0, clock)  # 9 saved, then 0.8 calls/s: 57 in a minute
    for _ in range(9):
        assert bucket.wait_s() == 0.0
        bucket.take()
    assert bucket.wait_s() == pytest.approx(1 / 0.8)
    clock.now += 1000.0
    for _ in range(9):  # saved up to the burst, no more
        assert bucket.wait_s() == 0.0
        bucket.take()
    assert bucket.wait_s() == pytest.approx(1 / 0.8)
    bucket.pause(5.0)
    assert bucket.wait_s() == pytest.approx(5.0)
    clock.now += 5.0
    bucket.take()  # the retry goes as soon as the pause ends, then the steady rate
    assert bucket.wait_s() == pytest.approx(1 / 0.8)


def test_a_bucket_saves_a_burst_that_ten_status_messages_fit_in() -> None:
    # A restart tells every orphaned run's thread at once; ten of them in one workspace
    # must not wait out a minute of chat.update's steady rate.
    clock = FakeClock()
    bucket = TokenBucket(LIMITS_PER_MINUTE["chat.update"], clock)
    sent_at = []
    for _ in range(10):
        clock.now += bucket.wait_s()
        bucket.take()
        sent_at.append(clock.now - 100.0)
    assert sent_at[:7] == [0.0] * 7
    assert sent_at[-1] == pytest.approx(3 * 60 / (0.95 * 50 - 7))  # 4.4 s


@pytest.mark.parametrize("method", sorted(LIMITS_PER_MINUTE))
def test_a_full_bucket_stays_under_the_tier_in_any_minute(method: str) -> None:
    limit = LIMITS_PER_MINUTE[method]
    bucket = TokenBucket(limit)
    assert bucket.capacity + 60 * bucket.rate <= WINDOW_SHARE * limit + 1e-9


# -- progress and finals ---------------------------------------------------------------


async def test_progress_coalesces_while_the_bucket_is_empty(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    async with running(client, {"chat.update": 300.0}) as budget:  # a token every 0.22 s
        await drain(budget, slack, 300.0)
        ts = status_message(slack)
        for step in range(50):
            budget.update_progress(CHANNEL, ts, text=f"step {step}", blocks=blocks("working"))
            await asyncio.sleep(0)  # one loop turn: the waiting worker must not send these
        await slack.wait_for_call("chat.update", lambda call: call.args["ts"] == ts)
    assert updates(slack, ts) == ["step 49"]


async def test_lazy_progress_is_rendered_once_when_sent_from_the_latest_state(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    """A run's state changes on every streamed word; only the write Slack takes renders."""
    async with running(client, {"chat.update": 300.0}) as budget:  # a token every 0.22 s
        await drain(budget, slack, 300.0)
        ts = status_message(slack)
        state = {"step": 0}
        renders: list[int] = []

        def render() -> tuple[str, list[dict[str, Any]]]:
            renders.append(state["step"])
            return f"step {state['step']}", blocks("working")

        for step in range(50):
            state["step"] = step
            budget.update_progress_lazily(CHANNEL, ts, render)
            await asyncio.sleep(0)  # one loop turn: the waiting worker must not send these
        state["step"] = 50  # changed after the last update was queued: still what is sent
        await slack.wait_for_call("chat.update", lambda call: call.args["ts"] == ts)
    assert updates(slack, ts) == ["step 50"]
    assert renders == [50]


async def test_progress_is_served_oldest_dirty_first(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    async with running(client, {"chat.update": 600.0}) as budget:  # 3 at once, then 9/s
        a, b, c, d, e = (status_message(slack) for _ in range(5))
        for ts, text in ((a, "a0"), (b, "b0"), (c, "c0"), (d, "d0"), (e, "e0"), (d, "d1")):
            budget.update_progress(CHANNEL, ts, text=text, blocks=[])
        await slack.wait_for_call("chat.update", lambda call: call.args["ts"] == a)
        # `a` changes again while d and e still wait: it goes behind them, not ahead.
        budget.update_progress(CHANNEL, a, text="a1", blocks=[])
        await slack.wait_until(lambda s: len(update_calls(s)) == 6)
    sent = [call.args["text"] for call in update_calls(slack)]
    assert sent == ["a0", "b0", "c0", "d1", "e0", "a1"]


async def test_a_final_goes_first_supersedes_progress_and_lands_once(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    async with running(client, {"chat.update": 600.0}) as budget:
        await drain(budget, slack, 600.0)
        ts, other, sentinel = (status_message(slack) for _ in range(3))
        budget.update_progress(CHANNEL, other, text="other working", blocks=[])
        budget.update_progress(CHANNEL, ts, text="working", blocks=[])
        assert await budget.update_final(CHANNEL, ts, text="done", blocks=blocks("done"))
        budget.update_progress(CHANNEL, ts, text="late progress", blocks=[])  # dropped
        budget.update_progress(CHANNEL, sentinel, text="sentinel", blocks=[])
        await slack.wait_for_call("chat.update", lambda call: call.args["ts"] == sentinel)
    assert [call.args["text"] for call in update_calls(slack)[-3:]] == [
        "done",
        "other working",
        "sentinel",
    ]
    assert updates(slack, ts) == ["done"]
    assert slack.message(CHANNEL, ts).blocks == blocks("done")


async def test_a_reopened_message_takes_progress_again_and_a_queued_final_gives_way(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    """A run resumed in its ended self's status message writes progress to it again; a
    final still waiting for the bucket (the old report) must not land over it later."""
    async with running(client, {"chat.update": 600.0}) as budget:
        ts, sentinel = status_message(slack), status_message(slack)
        assert await budget.update_final(CHANNEL, ts, text="paused", blocks=blocks("paused"))
        budget.update_progress(CHANNEL, ts, text="late progress", blocks=[])  # dropped

        budget.reopen(CHANNEL, ts)
        budget.update_progress(CHANNEL, ts, text="working again", blocks=[])
        await slack.wait_for_call("chat.update", lambda call: call.args["text"] == "working again")

        await drain(budget, slack, 600.0)
        waiting = asyncio.ensure_future(
            budget.update_final(CHANNEL, ts, text="old report", blocks=[])
        )
        await asyncio.sleep(0)  # one loop turn, no time: the task queues its final
        budget.reopen(CHANNEL, ts)
        assert await waiting is False
        budget.update_progress(CHANNEL, ts, text="live", blocks=[])
        budget.update_progress(CHANNEL, sentinel, text="sentinel", blocks=[])
        await slack.wait_for_call("chat.update", lambda call: call.args["ts"] == sentinel)
    assert updates(slack, ts) == ["paused", "working again", "live"]


async def test_a_final_lands_once_through_a_429_storm(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    slack.fail_next("chat.update", status=429, retry_after=1, times=3)
    with capture_logs() as logs:
        async with running(client, {"chat.update": 600.0}) as budget:
            ts = status_message(slack)
            budget.update_progress(CHANNEL, ts, text="step 0", blocks=[])
            await slack.wait_until(lambda s: len(update_calls(s)) == 1)
            for step in range(1, 21):  # all while chat.update is paused
                budget.update_progress(CHANNEL, ts, text=f"step {step}", blocks=[])
            await slack.wait_until(lambda s: len(update_calls(s)) == 2)
            delivered = await budget.update_final(CHANNEL, ts, text="done", blocks=[])
    assert delivered
    calls = update_calls(slack)
    assert [(call.status, call.args["text"]) for call in calls] == [
        (429, "step 0"),
        (429, "step 20"),
        (429, "done"),
        (200, "done"),
    ]
    assert all(b.at - a.at >= 1.0 - TIMER_SLACK_S for a, b in pairwise(calls))
    assert updates(slack, ts) == ["done"]
    pauses = [
        (entry["log_level"], entry["method"], entry["retry_after_s"])
        for entry in logs
        if entry["event"] == "slack_budget.rate_limited"
    ]
    assert pauses == [("warning", "chat.update", 1.0)] * 3


@pytest.mark.parametrize("status", [500, 503])
async def test_a_final_is_resent_after_a_server_error(
    slack: FakeSlack, client: AsyncWebClient, status: int
) -> None:
    slack.fail_next("chat.update", status=status)
    async with running(client) as budget:
        ts = status_message(slack)
        assert await budget.update_final(CHANNEL, ts, text="done", blocks=[])
    assert [call.status for call in update_calls(slack)] == [status, 200]
    assert updates(slack, ts) == ["done"]


async def test_a_final_slack_refuses_is_given_up_and_logged(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    slack.fail_next("chat.update", error="msg_blocks_too_long")
    with capture_logs() as logs:
        async with running(client) as budget:
            ts = status_message(slack)
            assert not await budget.update_final(CHANNEL, ts, text="done", blocks=[])
    assert len(update_calls(slack)) == 1
    gave_up = [entry for entry in logs if entry["event"] == "slack_budget.final_gave_up"]
    assert [(e["log_level"], e["ts"], e["error"], e["attempts"]) for e in gave_up] == [
        ("error", ts, "msg_blocks_too_long", 1)
    ]


async def test_a_cancelled_caller_does_not_withdraw_its_final(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    # As at shutdown: the run is cancelled while its final waits, then the budget closes.
    budget = SlackRateBudget(client, team_id=TEAM, me=ME, tiers={"chat.update": 300.0})
    await budget.start()
    await drain(budget, slack, 300.0)
    ts = status_message(slack)
    caller = asyncio.create_task(budget.update_final(CHANNEL, ts, text="done", blocks=[]))
    await asyncio.sleep(0)  # one loop turn: the caller queues its write
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await budget.close()
    assert updates(slack, ts) == ["done"]


# -- posts and other methods -----------------------------------------------------------


async def test_a_post_is_resent_after_a_429_and_posted_once(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    slack.fail_next("chat.postMessage", status=429, retry_after=1)
    async with running(client) as budget:
        ts = await budget.post_message(CHANNEL, text="status", blocks=blocks("status"))
    refused, posted = slack.calls("chat.postMessage")
    assert (refused.status, posted.status) == (429, 200)
    assert posted.at - refused.at >= 1.0 - TIMER_SLACK_S
    assert [message.ts for message in slack.messages(CHANNEL)] == [ts]


@pytest.mark.parametrize(
    ("status", "error", "raised"),
    [
        (500, None, SlackUnavailable),
        (503, None, SlackUnavailable),
        (200, "not_in_channel", SlackRefused),
    ],
)
async def test_a_failed_post_raises_and_is_never_resent(
    slack: FakeSlack, status: int, error: str | None, raised: type[SlackError]
) -> None:
    # The client's own retry handlers would resend a 5xx; the budget must not let them.
    handlers = [AsyncServerErrorRetryHandler(max_retry_count=2), AsyncConnectionErrorRetryHandler()]
    async with aiohttp.ClientSession() as session:
        client = AsyncWebClient(
            token=BOT_TOKEN, base_url=slack.api_url, session=session, retry_handlers=handlers
        )
        slack.fail_next("chat.postMessage", status=status, error=error)
        async with running(client) as budget:
            with pytest.raises(raised) as failure:
                await budget.post_message(CHANNEL, text="status", thread_ts="1700000000.000100")
    assert failure.value.method == "chat.postMessage"
    assert len(slack.calls("chat.postMessage")) == 1
    assert slack.messages(CHANNEL) == []
    assert client.retry_handlers == handlers  # the caller's client is left as it was


METADATA = {"event_type": "threadpilot_run", "event_payload": {"run_id": "run-1"}}


async def tagged_post(budget: SlackRateBudget, thread_ts: str) -> str:
    return await budget.post_message(
        CHANNEL, text="status", blocks=blocks("status"), thread_ts=thread_ts, metadata=METADATA
    )


@pytest.mark.parametrize("landed", [False, True], ids=["not-done", "done"])
async def test_a_tagged_post_of_unknown_fate_is_looked_for_before_posting_again(
    slack: FakeSlack, client: AsyncWebClient, landed: bool
) -> None:
    parent = slack.seed_message(CHANNEL, "<@bot> do it")
    slack.fail_next("chat.postMessage", status=500, landed=landed)
    async with running(client) as budget:
        ts = await tagged_post(budget, parent)

    (status,) = [m for m in slack.thread(CHANNEL, parent) if m.is_bot]
    assert status.ts == ts and status.metadata == METADATA
    posts = slack.calls("chat.postMessage")
    assert [c.status for c in posts] == ([500] if landed else [500, 200])
    (lookup,) = slack.calls("conversations.replies")
    assert lookup.at > posts[0].at and (len(posts) == 1 or lookup.at < posts[1].at)


async def test_another_apps_message_with_our_metadata_is_never_taken_for_our_lost_post(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    """Another app (or a webhook) can post our metadata in the thread: after a post whose
    answer was lost, that message is not adopted as ours; ours is posted."""
    parent = slack.seed_message(CHANNEL, "<@bot> do it")
    forged = slack.seed_message(
        CHANNEL,
        "status",
        thread_ts=parent,
        metadata=METADATA,
        app={"bot_id": "B0ATTACKER1", "app_id": "A0ATTACKER1", "username": "threadpilot"},
    )
    slack.fail_next("chat.postMessage", status=500, landed=False)
    async with running(client) as budget:
        ts = await tagged_post(budget, parent)
        found = await budget.find_messages(CHANNEL, parent, METADATA)

    assert ts != forged and found == [ts]
    (ours,) = [m for m in slack.thread(CHANNEL, parent) if m.is_bot]
    assert ours.ts == ts
    assert [c.status for c in slack.calls("chat.postMessage")] == [500, 200]


async def test_a_tagged_post_is_not_resent_when_the_thread_cannot_be_read(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    parent = slack.seed_message(CHANNEL, "<@bot> do it")
    slack.fail_next("chat.postMessage", status=503)
    slack.fail_next("conversations.replies", status=500, times=3)
    async with running(client) as budget:
        with pytest.raises(SlackUnavailable) as failure:
            await tagged_post(budget, parent)

    assert failure.value.method == "chat.postMessage"
    assert len(slack.calls("chat.postMessage")) == 1  # its fate is unknown: never resent
    assert len(slack.calls("conversations.replies")) == 3


async def test_find_messages_reads_every_page_of_the_thread(
    slack: FakeSlack, client: AsyncWebClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slack_budget, "LOOKUP_PAGE_SIZE", 2)
    parent = slack.seed_message(CHANNEL, "<@bot> do it")
    other = {"event_type": "threadpilot_run", "event_payload": {"run_id": "run-2"}}
    tagged = []
    for n in range(5):
        slack.seed_message(CHANNEL, f"reply {n}", thread_ts=parent)
        tagged.append(
            slack.seed_message(
                CHANNEL, f"status {n}", thread_ts=parent, user=BOT, metadata=METADATA
            )
        )
        slack.seed_message(CHANNEL, "another run", thread_ts=parent, user=BOT, metadata=other)
    async with running(client) as budget:
        found = await budget.find_messages(CHANNEL, parent, METADATA)

    assert found == tagged
    assert len(slack.calls("conversations.replies")) == 8  # 16 messages, 2 a page


async def test_call_resends_only_retry_safe_methods_after_a_429(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    target = status_message(slack)
    slack.fail_next("reactions.add", status=429, retry_after=1)
    slack.fail_next("chat.postEphemeral", status=429, retry_after=1)
    async with running(client) as budget:

        async def ephemerals() -> None:
            with pytest.raises(SlackRateLimited) as limited:
                await budget.call(
                    "chat.postEphemeral", channel=CHANNEL, user=DEFAULT_USER, text="a"
                )
            assert limited.value.retry_after == 1.0
            # Not resent by the budget, but the pause holds for the next caller too.
            await budget.call("chat.postEphemeral", channel=CHANNEL, user=DEFAULT_USER, text="b")

        async with asyncio.TaskGroup() as group:
            group.create_task(
                budget.call("reactions.add", channel=CHANNEL, timestamp=target, name="eyes")
            )
            group.create_task(ephemerals())
    for method in ("reactions.add", "chat.postEphemeral"):
        first, second = slack.calls(method)
        assert (first.status, second.status) == (429, 200)
        assert second.at - first.at >= 1.0 - TIMER_SLACK_S
    assert slack.message(CHANNEL, target).reactions == {"eyes": (BOT,)}
    assert [ephemeral.text for ephemeral in slack.ephemerals(CHANNEL)] == ["b"]


async def test_methods_without_a_tier_entry_go_through_api_call(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    async with running(client) as budget:
        answer = await budget.call(
            "agents.sessions.setStatus", channel_id=CHANNEL, thread_ts="1.2", status="processing"
        )
        with pytest.raises(SlackRefused) as refused:
            await budget.call("agents.sessions.setStatus", channel_id=CHANNEL, status="bogus")
    assert answer["status"] == "processing"
    assert refused.value.error == "invalid_arguments"
    assert slack.state.session_status(CHANNEL, "1.2") == "processing"


async def test_the_budget_refuses_misuse(slack: FakeSlack, client: AsyncWebClient) -> None:
    budget = SlackRateBudget(client, team_id=TEAM, me=ME)
    with pytest.raises(BudgetNotRunning):
        await budget.post_message(CHANNEL, text="too early")
    await budget.start()
    with pytest.raises(ValueError, match="post_message"):
        await budget.call("chat.postMessage", channel=CHANNEL, text="blind resend risk")
    with pytest.raises(ValueError, match="update_final"):
        await budget.call("chat.update", channel=CHANNEL, ts="1.2", text="not coalesced")
    await budget.close()
    with pytest.raises(BudgetNotRunning):
        await budget.call("reactions.add", channel=CHANNEL, timestamp="1.2", name="eyes")
    budget.update_progress(CHANNEL, "1.2", text="dropped", blocks=[])
    assert not await budget.update_final(CHANNEL, "1.2", text="for the reconciler", blocks=[])
    assert slack.calls() == []


# -- closing ---------------------------------------------------------------------------


async def test_close_writes_pending_finals_and_drops_progress(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    budget = SlackRateBudget(client, team_id=TEAM, me=ME, tiers={"chat.update": 300.0})
    await budget.start()
    await drain(budget, slack, 300.0)
    ts, other = status_message(slack), status_message(slack)
    budget.update_progress(CHANNEL, other, text="progress", blocks=[])
    async with asyncio.TaskGroup() as group:
        final = group.create_task(budget.update_final(CHANNEL, ts, text="done", blocks=[]))
        group.create_task(budget.close())  # starts after the final is queued
    assert final.result() is True
    assert updates(slack, ts) == ["done"]
    assert updates(slack, other) == []


async def test_close_gives_up_on_finals_it_cannot_write_in_time(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    slack.fail_next("chat.update", status=429, retry_after=30)
    with capture_logs() as logs:
        budget = SlackRateBudget(client, team_id=TEAM, me=ME)
        await budget.start()
        ts = status_message(slack)
        async with asyncio.TaskGroup() as group:
            final = group.create_task(budget.update_final(CHANNEL, ts, text="done", blocks=[]))
            await slack.wait_for_call("chat.update")
            started = time.monotonic()
            await budget.close(flush_timeout_s=0.2)
            closing_took = time.monotonic() - started
    assert final.result() is False
    assert closing_took < 5.0  # bounded by the flush timeout, not by Retry-After
    assert len(update_calls(slack)) == 1
    events = [(entry["event"], entry.get("error")) for entry in logs]
    assert ("slack_budget.flush_timeout", None) in events
    assert ("slack_budget.final_gave_up", "the budget closed first") in events


# -- a busy workspace ------------------------------------------------------------------


async def test_fifty_concurrent_runs_stay_within_the_chat_update_budget(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    per_minute = 6000.0  # Tier 3 sped up 120 times, so the test takes about a second

    async with running(client, {"chat.update": per_minute}) as budget:

        async def run(n: int) -> tuple[str, str]:
            channel = f"C0RUN{n:05d}"
            ts = await budget.post_message(channel, text="starting", blocks=blocks("starting"))
            for step in range(5):
                budget.update_progress(channel, ts, text=f"run {n} step {step}", blocks=[])
                await asyncio.sleep(0)  # one loop turn, as a streaming run would yield
            # Each run keeps going until its last progress shows, then ends.
            await slack.wait_until(lambda s: s.message(channel, ts).text.endswith("step 4"), 10)
            assert await budget.update_final(channel, ts, text=f"run {n} done", blocks=[])
            return channel, ts

        async with asyncio.TaskGroup() as group:
            runs = [group.create_task(run(n)) for n in range(50)]

    assert [call for call in slack.calls() if call.status == 429] == []
    assert_within_budget([call.at for call in update_calls(slack)], per_minute)
    for n, task in enumerate(runs):
        channel, ts = task.result()
        texts = updates(slack, ts, channel)
        assert texts[-1] == f"run {n} done"
        assert texts.count(f"run {n} done") == 1
        assert all(text.startswith(f"run {n} step") for text in texts[:-1])
