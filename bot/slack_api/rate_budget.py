"""The per-workspace budget that every Slack Web API call of threadpilot goes through.

Slack limits each method per workspace and app, so there is one `SlackRateBudget` per team,
shared by every run in it (the rate table and token buckets are in
:mod:`bot.slack_api.rate_limits`). Here live the one worker task that writes status messages with
``chat.update`` (progress coalesced per message and served oldest-dirty-first; terminal
writes ahead of all progress, and retried), and which failure may be sent again: a 429
means Slack did nothing, a 5xx or a timeout means nobody knows, so only calls that are
harmless twice are resent after those. A post is the exception made safe: one tagged with
message metadata is looked for in its thread after such a failure, and posted again only
if it is not there. What a message says belongs in ``bot/views``; when to send it, to
its callers (a run's session, the reconciler, the handlers).

Each worker process keeps its own budget, and nothing is shared between them: several
workers may together send more than one budget allows, and what keeps them within
Slack's limit is Slack's own 429, which pauses that method's bucket for its Retry-After
in whichever worker got it.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError

from bot.errors import (
    BudgetNotRunning,
    SlackError,
    SlackRateLimited,
    SlackRefused,
    SlackUnavailable,
)
from bot.slack_api.rate_limits import (
    LIMITS_PER_MINUTE,
    UNLISTED_LIMIT,
    WINDOW_SHARE,
    TokenBucket,
    backoff_s,
    retry_after_s,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Mapping

    from slack_sdk.web.async_client import AsyncWebClient
    from slack_sdk.web.async_slack_response import AsyncSlackResponse

    from bot.observe.metrics import Metrics
    from bot.slack_api.credentials import TeamCredentials
    from bot.slack_api.identity import AppIdentity

__all__ = ["LIMITS_PER_MINUTE", "WINDOW_SHARE", "SlackRateBudget", "TokenBucket"]

log = structlog.get_logger("bot.slack_api.rate_budget")


# These have entry points of their own: progress must be coalesced and finals put first
# by the worker, and a post must never be resent blindly.
DEDICATED = {"chat.update": "update_progress/update_final", "chat.postMessage": "post_message"}
# Methods that are harmless twice, with the error a resend gets when the first attempt had
# landed after all (that counts as success). `call` resends these after a 429 and after a
# 5xx or timeout; the others raise, as only the caller knows whether a late or duplicated
# ephemeral or stream chunk is still wanted.
RETRY_SAFE: dict[str, str | None] = {
    "reactions.add": "already_reacted",
    "reactions.remove": "no_reaction",
    "chat.delete": "message_not_found",
    "chat.stopStream": "message_not_in_streaming_state",
    "views.publish": None,
    "agents.sessions.setStatus": None,
    "assistant.threads.setStatus": None,
    "conversations.replies": None,
    "conversations.info": None,
    "users.info": None,
    "auth.test": None,
}

REQUEST_TIMEOUT_S = 10.0
FINAL_ATTEMPTS, CALL_ATTEMPTS = 5, 3
WORKER_STOP_TIMEOUT_S = 2.0
LOOKUP_PAGE_SIZE, LOOKUP_PAGES = 200, 10  # a thread read for a post: 2,000 messages at most
FINALIZED_MEMORY = 10_000  # messages whose final is known, so late progress is dropped

_Key = tuple[str, str]  # (channel, ts) of a message


Render = Callable[[], tuple[str, list[dict[str, Any]]]]
"""Makes a message's ``(text, blocks)`` when its write is sent (a lazy progress update)."""


@dataclass(eq=False)
class _Progress:
    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    render: Render | None = None
    """Set for a lazy update: the message is made only when its write is sent."""

    @property
    def key(self) -> _Key:
        return (self.channel, self.ts)

    @property
    def where(self) -> dict[str, str]:
        """The message, as log fields."""
        return {"channel": self.channel, "ts": self.ts}

    def args(self) -> dict[str, Any]:
        if self.render is not None:
            self.text, self.blocks = self.render()
            self.render = None
        return {**self.where, "text": self.text, "blocks": self.blocks}


@dataclass(eq=False)
class _Final(_Progress):
    waiters: list[asyncio.Future[bool]] = field(default_factory=list)
    attempts: int = 0
    not_before: float = 0.0  # clock time of the next attempt (backoff after a 5xx)

    def settle(self, delivered: bool) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(delivered)


class SlackRateBudget:
    """Slack Web API calls for one workspace, kept within Slack's rate limits.

    ``tiers`` overrides Slack's limit (calls per minute) for some methods; the budget
    still keeps within ``WINDOW_SHARE`` of it. ``clock`` is the time source of the buckets
    and backoffs.
    Blocks are sent as they are when their turn comes: do not mutate them after handing over.
    """

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        team_id: str,
        me: AppIdentity,
        tiers: Mapping[str, float] | None = None,
        clock: Callable[[], float] = time.monotonic,
        metrics: Metrics | None = None,
        credentials: TeamCredentials | None = None,
    ) -> None:
        """``credentials``: OAuth mode's token for each call (None: the client's own)."""
        # slack_sdk's retry handlers would resend behind the budget's back (its default
        # resends after a connection reset, which can post a message twice), so calls go
        # through a copy of the client without them: every retry is decided here.
        self._client = copy.copy(client)
        self._client.retry_handlers = []
        self.team_id = team_id
        self._me = me
        """Whose messages :meth:`find_messages` accepts: this app's only."""
        self._limits = {**LIMITS_PER_MINUTE, **(tiers or {})}
        self._clock = clock
        self._metrics = metrics
        self._credentials = credentials
        self._buckets: dict[str, TokenBucket] = {}
        self._progress: OrderedDict[_Key, _Progress] = OrderedDict()  # oldest dirty first
        self._finals: OrderedDict[_Key, _Final] = OrderedDict()
        self._in_flight: _Final | None = None
        self._finalized: OrderedDict[_Key, None] = OrderedDict()
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._closing = self._closed = False
        self._log = log.bind(team_id=team_id)

    async def start(self) -> None:
        """Start the worker that writes status messages."""
        if self._worker is not None:
            raise RuntimeError("SlackRateBudget.start() was already called")
        self._worker = asyncio.create_task(self._work(), name=f"slack-budget:{self.team_id}")
        self._worker.add_done_callback(self._on_worker_done)

    async def close(self, *, flush_timeout_s: float = 5.0) -> None:
        """Write pending finals (for at most ``flush_timeout_s``), then stop the worker.

        Pending progress is dropped; finals still unwritten resolve False and are logged.
        """
        if self._closing:
            return  # closed, or another close() is flushing
        self._closing = True
        self._progress.clear()
        if self._worker is None:
            self._closed = True
            return
        try:
            async with asyncio.timeout(flush_timeout_s):
                while waiters := self._final_waiters():
                    await asyncio.wait(waiters)
        except TimeoutError:
            self._log.error("slack_budget.flush_timeout", pending=len(self._final_waiters()))
        finally:
            self._closed = True
            self._worker.cancel()
            # asyncio.wait neither raises the worker's CancelledError here nor hides ours.
            done, _ = await asyncio.wait({self._worker}, timeout=WORKER_STOP_TIMEOUT_S)
            if not done:
                self._log.error("slack_budget.worker_stop_timeout")
            self._give_up_all("the budget closed first")

    # -- status messages ---------------------------------------------------------------

    def update_progress(
        self, channel: str, ts: str, *, text: str, blocks: list[dict[str, Any]]
    ) -> None:
        """Queue a progress update of a message; only its latest pending one is sent."""
        self._queue_progress(channel, ts, text, blocks, None)

    def update_progress_lazily(self, channel: str, ts: str, render: Render) -> None:
        """Like :meth:`update_progress`, but the message is made by ``render`` only when
        its write is sent: a caller whose state changes often pays for one rendering per
        write Slack takes, not one per change (most would be coalesced away)."""
        self._queue_progress(channel, ts, "", [], render)

    def _queue_progress(
        self,
        channel: str,
        ts: str,
        text: str,
        blocks: list[dict[str, Any]],
        render: Render | None,
    ) -> None:
        key = (channel, ts)
        if self._closing or key in self._finalized:
            reason = "closing" if self._closing else "final written"
            self._log.debug("slack_budget.progress_dropped", channel=channel, ts=ts, reason=reason)
            return
        if (pending := self._progress.get(key)) is not None:
            # Latest wins, and the message keeps its place in line (oldest dirty first).
            pending.text, pending.blocks, pending.render = text, blocks, render
            self._log.debug("slack_budget.progress_coalesced", channel=channel, ts=ts)
            return
        self._progress[key] = _Progress(channel, ts, text, blocks, render)
        self._wake.set()

    def reopen(self, channel: str, ts: str) -> None:
        """A live run writes to this message again (a run resumed in the status message
        of its ended self): its progress counts again. The mark that drops progress
        after a final is cleared, and a final still waiting to be written (the ended
        run's report) gives way, settling False: written after the run's progress, it
        would stand over a live run and hide its buttons."""
        key = (channel, ts)
        self._finalized.pop(key, None)
        if (job := self._finals.pop(key, None)) is not None:
            self._log.info("slack_budget.final_superseded", **job.where, by="a live run")
            job.settle(False)

    async def update_final(
        self, channel: str, ts: str, *, text: str, blocks: list[dict[str, Any]]
    ) -> bool:
        """Write a message's terminal state ahead of all progress; True once Slack has it.

        Resent after 429s and 5xx/timeouts (chat.update is idempotent), FINAL_ATTEMPTS in
        all; False when given up (logged), for a reconciler to retry later. Cancelling the
        caller does not withdraw the write.
        """
        if self._worker is None:
            raise BudgetNotRunning(self.team_id)
        if self._closed or self._worker.done():
            self._give_up(_Final(channel, ts, text, blocks), "the budget is closed")
            return False
        key = (channel, ts)
        if self._progress.pop(key, None) is not None:
            self._log.debug("slack_budget.progress_superseded", channel=channel, ts=ts)
        self._finalized[key] = None
        self._finalized.move_to_end(key)
        if len(self._finalized) > FINALIZED_MEMORY:
            self._finalized.popitem(last=False)
        if (job := self._finals.get(key)) is None:
            job = self._finals[key] = _Final(channel, ts, text, blocks)
        else:  # an earlier final for this message is still queued: this one replaces it
            job.text, job.blocks = text, blocks
        waiter = asyncio.get_running_loop().create_future()
        job.waiters.append(waiter)
        self._wake.set()
        # Shielded, so a cancelled caller leaves the future (and the write) alone.
        return await asyncio.shield(waiter)

    # -- other calls -------------------------------------------------------------------

    async def post_message(
        self,
        channel: str,
        *,
        text: str,
        blocks: list[dict[str, Any]] | None = None,
        thread_ts: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Post a message once the channel's budget allows; returns its ts.

        Resent after a 429 (Slack did not post it). A 5xx, timeout or lost connection
        leaves the post's fate unknown. A post with ``metadata`` in a thread is then
        looked for there (:meth:`find_messages`): found, it is the post and its ts is the
        answer; not found, it is sent again. Without them, or when the thread cannot be
        read, SlackUnavailable is raised: a resend could post it twice.
        """
        self._require_running()
        bucket = self._bucket("chat.postMessage", channel)
        args: dict[str, Any] = {"channel": channel, "text": text}
        args |= {"blocks": blocks} if blocks is not None else {}
        args |= {"thread_ts": thread_ts} if thread_ts is not None else {}
        args |= {"metadata": metadata} if metadata is not None else {}
        for attempt in range(1, CALL_ATTEMPTS + 1):
            await bucket.acquire()
            try:
                response = await self._send(bucket, "chat.postMessage", args)
            except SlackRateLimited:
                if attempt == CALL_ATTEMPTS:
                    raise
                continue  # the bucket is paused for Retry-After: acquire() waits it out
            except SlackUnavailable as exc:
                if thread_ts is None or metadata is None:
                    raise
                # Give a post that is still landing a moment to show up in the thread.
                await asyncio.sleep(backoff_s(attempt))
                landed = await self._landed_post(channel, thread_ts, metadata, exc)
                if landed is not None:
                    return landed
                if attempt == CALL_ATTEMPTS:
                    raise
                continue  # not there: posting again cannot duplicate it
            return str(response["ts"])
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def find_messages(
        self, channel: str, thread_ts: str, metadata: dict[str, Any]
    ) -> list[str]:
        """The ts of each message of this app's (:meth:`AppIdentity.wrote`) in the thread
        that carries ``metadata``, oldest first. Another app can post the same metadata;
        its message is never taken for ours.

        Reads ``conversations.replies`` with ``include_all_metadata`` (at most
        LOOKUP_PAGES pages); raises SlackError when the thread cannot be read.
        """
        found: list[str] = []
        cursor = ""
        for _ in range(LOOKUP_PAGES):
            page = await self.call(
                "conversations.replies",
                channel=channel,
                ts=thread_ts,
                include_all_metadata=True,
                limit=LOOKUP_PAGE_SIZE,
                **({"cursor": cursor} if cursor else {}),
            )
            found += [
                str(m["ts"])
                for m in page.get("messages", [])
                if _carries(m, metadata) and self._me.wrote(m)
            ]
            cursor = str((page.get("response_metadata") or {}).get("next_cursor") or "")
            if not cursor:
                break
        return found

    async def _landed_post(
        self, channel: str, thread_ts: str, metadata: dict[str, Any], failure: SlackUnavailable
    ) -> str | None:
        """The ts of a post whose answer was lost if it is in the thread, else None."""
        where = {"channel": channel, "thread_ts": thread_ts, "error": failure.error}
        try:
            found = await self.find_messages(channel, thread_ts, metadata)
        except SlackError as exc:
            self._log.warning("slack_budget.post_lookup_failed", **where, lookup_error=exc.error)
            raise failure from exc
        if found:
            self._log.warning("slack_budget.post_landed_after_all", **where, ts=found[0])
            return found[0]
        self._log.warning("slack_budget.post_not_landed", **where, next="posting again")
        return None

    async def call(self, method: str, **kwargs: Any) -> dict[str, Any]:
        """Any other Web API method, once its budget allows; returns Slack's JSON answer.

        Methods in RETRY_SAFE are resent after a 429 or a 5xx/timeout; the others raise
        SlackRateLimited or SlackUnavailable. Slack's ``ok: false`` raises SlackRefused.
        """
        self._require_running()
        if method in DEDICATED:
            raise ValueError(f"send {method} with SlackRateBudget.{DEDICATED[method]}")
        bucket = self._bucket(method)
        for attempt in range(1, CALL_ATTEMPTS + 1):
            await bucket.acquire()
            last = method not in RETRY_SAFE or attempt == CALL_ATTEMPTS
            try:
                return await self._send(bucket, method, kwargs)
            except SlackRateLimited:
                if last:
                    raise
            except SlackUnavailable:
                if last:
                    raise
                await asyncio.sleep(backoff_s(attempt))
            except SlackRefused as exc:
                if attempt > 1 and exc.error == RETRY_SAFE.get(method):
                    return {"ok": True}  # an earlier attempt had landed after all
                raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    # -- the worker --------------------------------------------------------------------

    async def _work(self) -> None:
        bucket = self._bucket("chat.update")
        while True:
            await self._wait_for_work()
            await bucket.acquire()
            # Chosen only now, token in hand: a final that came in meanwhile goes first,
            # and progress carries its latest text.
            job = self._next_write()
            if isinstance(job, _Final):
                await self._write_final(bucket, job)
            elif job is not None:
                await self._write_progress(bucket, job)

    async def _wait_for_work(self) -> None:
        while (ready_in := self._ready_in()) != 0.0:
            self._wake.clear()
            try:
                async with asyncio.timeout(ready_in):  # None: until new work comes in
                    await self._wake.wait()
            except TimeoutError:
                pass  # a final's backoff is over

    def _ready_in(self) -> float | None:
        """Seconds until a queued write may go: 0 now, None when nothing is queued."""
        if self._progress:
            return 0.0
        if not self._finals:
            return None
        return max(0.0, min(job.not_before for job in self._finals.values()) - self._clock())

    def _next_write(self) -> _Progress | None:
        now = self._clock()
        for key, job in self._finals.items():
            if job.not_before <= now:
                del self._finals[key]
                return job
        return self._progress.popitem(last=False)[1] if self._progress else None

    async def _write_progress(self, bucket: TokenBucket, job: _Progress) -> None:
        try:
            await self._send(bucket, "chat.update", job.args())
        except (SlackRateLimited, SlackUnavailable):
            # Still the latest state unless something newer came in meanwhile. It goes to
            # the back of the line, so one failing message cannot hold up the others.
            if not (self._closing or job.key in self._progress or job.key in self._finalized):
                self._progress[job.key] = job
        except SlackRefused as exc:
            self._log.warning("slack_budget.progress_refused", **job.where, error=exc.error)
        except Exception:  # a bug here must not stop the workspace's other status messages
            self._log.exception("slack_budget.progress_failed", **job.where)

    async def _write_final(self, bucket: TokenBucket, job: _Final) -> None:
        job.attempts += 1
        self._in_flight = job  # where close() finds it if the worker is cancelled mid-call
        retry_in: float | None = None
        try:
            await self._send(bucket, "chat.update", job.args())
        except SlackRateLimited as exc:
            retry_in, error = 0.0, exc.error  # the bucket's pause is the wait
        except SlackUnavailable as exc:
            retry_in, error = backoff_s(job.attempts), exc.error
        except SlackRefused as exc:
            error = exc.error
        except Exception as exc:  # a bug here must not stop the workspace's other finals
            self._log.exception("slack_budget.final_failed", **job.where)
            error = repr(exc)
        else:
            error = ""
        self._in_flight = None
        if not error:
            job.settle(True)
        elif retry_in is None or job.attempts >= FINAL_ATTEMPTS:
            self._give_up(job, error)
        elif (newer := self._finals.get(job.key)) is not None:
            newer.waiters.extend(job.waiters)  # its text is the one that will stand
        else:
            job.not_before = self._clock() + retry_in
            self._finals[job.key] = job
            self._finals.move_to_end(job.key, last=False)  # it was first in line

    def _final_waiters(self) -> list[asyncio.Future[bool]]:
        jobs = [*self._finals.values(), *([self._in_flight] if self._in_flight else [])]
        return [waiter for job in jobs for waiter in job.waiters if not waiter.done()]

    def _give_up(self, job: _Final, error: str) -> None:
        where, attempts = job.where, job.attempts
        self._log.error("slack_budget.final_gave_up", **where, error=error, attempts=attempts)
        job.settle(False)

    def _give_up_all(self, reason: str) -> None:
        jobs = [*self._finals.values(), *([self._in_flight] if self._in_flight else [])]
        self._finals.clear()
        self._in_flight = None
        for job in jobs:
            self._give_up(job, reason)

    def _on_worker_done(self, task: asyncio.Task[None]) -> None:
        # The worker only ends by cancellation (close); anything else is a bug, reported
        # now, and the finals waiting on it are released rather than left hanging.
        if not task.cancelled():
            self._log.error("slack_budget.worker_crashed", exc_info=task.exception())
            self._give_up_all("the budget's worker crashed")

    # -- one HTTP call -----------------------------------------------------------------

    def _require_running(self) -> None:
        if self._worker is None or self._closed:
            raise BudgetNotRunning(self.team_id)

    def _bucket(self, method: str, channel: str | None = None) -> TokenBucket:
        name = f"{method}@{channel}" if channel else method
        if (bucket := self._buckets.get(name)) is None:
            limit = self._limits.get(method, UNLISTED_LIMIT)
            bucket = self._buckets[name] = TokenBucket(limit, self._clock)
        return bucket

    async def _send(self, bucket: TokenBucket, method: str, args: dict[str, Any]) -> dict[str, Any]:
        """One HTTP request, never retried; slack_sdk's and aiohttp's errors translated."""
        if self._metrics is not None:
            self._metrics.slack_call(self.team_id, method)
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                if self._credentials is not None:
                    # OAuth mode: this workspace's token, read from its installation's
                    # cache at each call (a refreshed token is used from the next one).
                    args = {**args, "token": await self._credentials.bot_token(self.team_id)}
                response = await self._dispatch(method, args)
        except SlackApiError as exc:
            error = self._translate(bucket, method, exc)
            if self._credentials is not None and isinstance(error, SlackRefused):
                self._credentials.refused(self.team_id, error.error)
            raise error from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise SlackUnavailable(method, f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(response.data, dict):
            raise SlackUnavailable(method, "the answer was not JSON", status=response.status_code)
        return response.data

    def _dispatch(self, method: str, args: dict[str, Any]) -> Awaitable[AsyncSlackResponse]:
        # slack_sdk's typed method knows how Slack wants each method's arguments (JSON or
        # form, what to serialise); api_call with a JSON body covers methods it lacks.
        typed = getattr(self._client, method.replace(".", "_"), None)
        if typed is None:
            return self._client.api_call(method, json=args)
        response: Awaitable[AsyncSlackResponse] = typed(**args)
        return response

    def _translate(self, bucket: TokenBucket, method: str, exc: SlackApiError) -> SlackError:
        response = exc.response
        status = int(response.status_code)
        data = response.data if isinstance(response.data, dict) else {}
        error = str(data.get("error") or f"http_{status}")
        if status == 429 or error == "ratelimited":
            retry_after = retry_after_s(response.headers)
            bucket.pause(retry_after)
            if self._metrics is not None:
                self._metrics.slack_429(self.team_id, method)
            self._log.warning("slack_budget.rate_limited", method=method, retry_after_s=retry_after)
            return SlackRateLimited(method, retry_after=retry_after)
        if status >= 500:
            return SlackUnavailable(method, error, status=status)
        return SlackRefused(method, error, status=status)


def _carries(message: Mapping[str, Any], metadata: Mapping[str, Any]) -> bool:
    found = message.get("metadata")
    return isinstance(found, dict) and all(found.get(k) == v for k, v in metadata.items())
