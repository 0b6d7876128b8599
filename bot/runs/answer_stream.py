"""A run's streamed answer: its text, and its tools and sub-agents as a task timeline.

One Slack message per run, written with ``chat.startStream`` / ``chat.appendStream`` /
``chat.stopStream`` (docs/slack-setup.md). Everything goes as stream ``chunks``: the
answer as ``markdown_text``, each tool call and each sub-agent as a ``task_update``
(timeline mode: the cards sit among the text where they happened), and the run's task
as the ``plan_update`` title, sent with the first task. One owned task pumps the queue;
queued text is merged (its pieces joined only when sent) and a task's queued updates are
coalesced (latest wins).

Slack ends a stream about five minutes after it starts: later appends (and the stop)
are refused with ``message_not_in_streaming_state``. The message stays, so the stream
carries on as a plain message: from then on it is rewritten whole with ``chat.update``
(coalesced by the budget, paced here) with the answer so far and its tasks as a ``plan``
block, and once the run has ended it gets its final form the same way. No text is lost:
what the refused append carried is part of the whole answer written next, an answer too
long for one message goes on in follow-up messages in the thread
(:func:`bot.views.answer.render_answer`), and if Slack refuses the final rewrite all the
same, everything the message does not show yet is posted after it.

Where streaming is refused (or fails), nothing more goes to the stream: the answer is
shown in the status message instead, which also shows the running tool and sub-agents.
"""

from __future__ import annotations

import asyncio
from collections import deque
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import structlog

from bot.errors import BudgetNotRunning, SlackError
from bot.slack_api.surface import means_unavailable
from bot.views.answer import Task, answer_metadata, follow_ups, render_answer

if TYPE_CHECKING:
    from collections.abc import Callable

    from bot.slack_api.surface import SlackSurface
    from bot.views.answer import AnswerMessages
    from bot.views.status import RenderedMessage

__all__ = ["STREAM_EXPIRED", "AnswerStream", "TaskStatus"]

log = structlog.get_logger("bot.runs.answer_stream")

STREAM_EXPIRED = "message_not_in_streaming_state"
"""Slack's answer to an append or stop once the stream has ended (about 5 minutes in)."""
_APPEND_CHARS = 10_000
"""Below the 12,000-character markdown limit of one chunk, with a margin."""
_STREAM_CLOSE_S = 5.0
_REFRESH_EVERY_S = 1.0
"""An expired stream's message is rewritten at most this often while the run goes on."""
_TITLE_CHARS = 200
_DETAILS_CHARS = 500


class TaskStatus(StrEnum):
    """A ``task_update`` chunk's status (Slack accepts exactly these)."""

    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETE = "complete"
    ERROR = "error"


class AnswerStream:
    """Streams answer text and task updates into one Slack message."""

    def __init__(
        self,
        surface: SlackSurface,
        channel: str,
        thread_ts: str,
        user: str,
        team: str,
        *,
        run_id: str | None = None,
        plan_title: str | None = None,
        answer: Callable[[], str] | None = None,
    ) -> None:
        """``run_id``: tags the message (and any follow-up) with the run's answer
        metadata. ``answer``: the answer that counts so far (an expired stream's message
        is rewritten with it); by default, all the text pushed here."""
        self._surface = surface
        self._budget = surface.budget
        """The workspace's rate budget: every call of the stream goes through it."""
        self._channel = channel
        self._thread_ts = thread_ts
        self._recipient = {"recipient_user_id": user, "recipient_team_id": team}
        self._run_id = run_id
        # chat.startStream takes no metadata: set by chat.stopStream.
        self._metadata = answer_metadata(run_id) if run_id is not None else None
        self._plan_title = plan_title[:_TITLE_CHARS] if plan_title else None
        self._pushed: list[str] = []
        self._streamed: list[str] = []
        """The text Slack took into the stream: what its message shows."""
        self._answer = answer or (lambda: "".join(self._pushed))
        self.revised = False
        """True once text pushed here was voided: the message needs :meth:`rewrite`."""
        self.expired = False
        """True once Slack ended the stream: the message is written with chat.update."""
        self._queue: deque[dict[str, Any]] = deque()
        self._tasks: dict[str, dict[str, Any]] = {}
        """Every task shown, by id: its latest ``task_update`` chunk."""
        self._wake = asyncio.Event()
        self._closing = False
        self._failed = False
        self._task: asyncio.Task[None] | None = None
        self.ts: str | None = None

    @property
    def active(self) -> bool:
        """True while text goes to the stream's message (not to the status message)."""
        return not self._failed and self._surface.streaming.available

    @property
    def complete(self) -> bool:
        """True if the whole answer reached the streamed message (none fell back)."""
        return self.ts is not None and not self._failed

    def start(self) -> None:
        if self._surface.streaming.available:
            self._task = asyncio.create_task(self._pump(), name="answer-stream")

    # -- what the run adds ------------------------------------------------------------

    def push(self, text: str) -> None:
        if self._task is None or self._failed:
            return
        self._pushed.append(text)
        last = self._queue[-1] if self._queue else None
        if last is not None and last["type"] == "markdown_text":
            # Joined when sent (_take): appending stays O(1) however long the stream waits.
            last["parts"].append(text)
        else:
            self._queue.append({"type": "markdown_text", "parts": [text]})
        self._wake.set()

    def void(self, marker: str) -> None:
        """Text pushed for a failed attempt is void: say so now (a stream only appends),
        and remember to :meth:`rewrite` the message at the end."""
        if self._task is None or self._failed:
            return
        self.revised = True
        self.push(marker)

    def task(
        self,
        task_id: str,
        status: TaskStatus,
        *,
        title: str | None = None,
        details: str | None = None,
    ) -> None:
        """Show (or move on) one of the run's tasks: a tool call or a sub-agent.

        ``title`` is needed the first time; later updates keep it (and the details)."""
        if self._task is None or self._failed:
            return
        shown = self._tasks.get(task_id)
        if shown is None and title is None:
            return  # never shown (it started before the stream did): nothing to move on
        title = title or (shown["title"] if shown else "")
        details = details or (shown.get("details") if shown else None)
        chunk: dict[str, Any] = {
            "type": "task_update",
            "id": task_id,
            "title": title[:_TITLE_CHARS],
            "status": status.value,
        }
        if details:
            chunk["details"] = details[:_DETAILS_CHARS]
        if not self._tasks and self._plan_title:
            self._queue.append({"type": "plan_update", "title": self._plan_title})
        self._tasks[task_id] = chunk
        queued = next(
            (c for c in self._queue if c["type"] == "task_update" and c["id"] == task_id), None
        )
        if queued is not None:
            queued.update(chunk)  # not sent yet: only its latest state goes
        else:
            self._queue.append(dict(chunk))
        self._wake.set()

    # -- ending -------------------------------------------------------------------------

    async def drain(self) -> None:
        """Send what is queued and end the pump (bounded)."""
        if self._task is None:
            return
        self._closing = True
        self._wake.set()
        try:
            async with asyncio.timeout(_STREAM_CLOSE_S):
                await self._task
        except TimeoutError:
            log.warning("stream.close_timed_out")
            await self.cancel()

    async def stop(self) -> None:
        """Close a started stream, even if streaming was switched off since (bounded).

        Never left "streaming" in Slack: a refused append does not excuse the stop. Tasks
        still open (a tool cut off by an Abort) are closed as ``error`` with it.
        """
        if self.ts is None or self.expired:
            return
        open_tasks = [
            {**chunk, "status": TaskStatus.ERROR.value}
            for chunk in self._tasks.values()
            if chunk["status"] in (TaskStatus.PENDING, TaskStatus.IN_PROGRESS)
        ]
        try:
            async with asyncio.timeout(_STREAM_CLOSE_S):
                await self._budget.call(
                    "chat.stopStream",
                    channel=self._channel,
                    ts=self.ts,
                    **({"chunks": open_tasks} if open_tasks else {}),
                    **({"metadata": self._metadata} if self._metadata else {}),
                )
        except SlackError as exc:
            if exc.error == STREAM_EXPIRED:
                self._expire()
            else:
                log.warning("stream.stop_failed", error=exc.error)
        except TimeoutError as exc:
            log.warning("stream.stop_failed", error=str(exc))
        else:
            for chunk in open_tasks:
                self._tasks[chunk["id"]] = chunk

    async def end(self, answer: str) -> None:
        """Stop the stream, then give its message its final form if it needs one: the
        answer that counts after a voided attempt, or the whole answer after Slack ended
        the stream."""
        await self.stop()
        if self.revised or self.expired:
            await self.rewrite(answer)

    async def rewrite(self, answer: str) -> None:
        """Replace the stream's message with ``answer`` and its tasks (bounded; logged on
        failure).

        Only when the whole answer had reached the stream: a stream that fell back left
        the answer to the status message. Nothing left to show at all: the message goes.
        """
        if not self.complete or self.ts is None:
            return
        try:
            async with asyncio.timeout(_STREAM_CLOSE_S):
                rendered = self._render(answer)
                if rendered is None:
                    await self._budget.call("chat.delete", channel=self._channel, ts=self.ts)
                    return
                first, rest = rendered.first, rendered.rest
                if not await self._budget.update_final(
                    self._channel, self.ts, text=first.text, blocks=first.blocks
                ):
                    # The message stays as it stood: what it does not show goes after it.
                    rest = follow_ups(self._not_shown(answer))
                    log.warning("stream.rewrite_failed", follow_ups=len(rest))
        except (SlackError, TimeoutError) as exc:
            log.warning("stream.rewrite_failed", error=str(exc))
            return
        await self._follow_up(rest)

    def _not_shown(self, answer: str) -> str:
        """What of ``answer`` the stream's message does not show: the part after the text
        streamed, or all of it if what was streamed is not its beginning (a voided try)."""
        streamed = "".join(self._streamed).strip()
        whole = answer.strip()
        return whole[len(streamed) :] if whole.startswith(streamed) else whole

    async def _follow_up(self, pieces: tuple[RenderedMessage, ...]) -> None:
        """Post the rest of a long answer in the thread, under the message (bounded)."""
        for number, piece in enumerate(pieces, start=1):
            metadata = answer_metadata(self._run_id, number) if self._run_id else None
            try:
                async with asyncio.timeout(_STREAM_CLOSE_S):
                    await self._budget.post_message(
                        self._channel,
                        text=piece.text,
                        blocks=piece.blocks,
                        thread_ts=self._thread_ts,
                        metadata=metadata,
                    )
            except (SlackError, TimeoutError, BudgetNotRunning) as exc:
                log.error("stream.follow_up_failed", piece=number, error=repr(exc))
                return

    async def finish(self) -> None:
        """Drain, then stop: the whole close, for callers with nothing in between."""
        await self.drain()
        await self.stop()

    async def cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.wait([self._task], timeout=_STREAM_CLOSE_S)

    # -- the pump -------------------------------------------------------------------------

    async def _pump(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue and not self._failed and not self.expired:
                await self._send(self._take())
            if self.expired and not self._failed:
                self._queue.clear()  # the whole answer is written below, not appended
                if not self._closing:
                    self._refresh()
                    await asyncio.sleep(_REFRESH_EVERY_S)  # pacing: chat.update is Tier 3
            # A failed stream sends nothing more: what was queued before the failure must
            # not keep drain() waiting out its timeout.
            if self._closing and (self._failed or self.expired or not self._queue):
                return

    def _take(self) -> list[dict[str, Any]]:
        """The next call's chunks, in order: at most _APPEND_CHARS of text."""
        taken: list[dict[str, Any]] = []
        room = _APPEND_CHARS
        while self._queue and room > 0:
            chunk = self._queue[0]
            if chunk["type"] != "markdown_text":
                taken.append(self._queue.popleft())
                continue
            text = "".join(chunk["parts"])
            if len(text) > room:
                taken.append({"type": "markdown_text", "text": text[:room]})
                chunk["parts"] = [text[room:]]
                break
            room -= len(text)
            self._queue.popleft()
            taken.append({"type": "markdown_text", "text": text})
        return taken

    async def _send(self, chunks: list[dict[str, Any]]) -> None:
        if self.ts is None:
            reply = await self._call(
                "chat.startStream",
                channel=self._channel,
                thread_ts=self._thread_ts,
                chunks=chunks,
                task_display_mode="timeline",
                **self._recipient,
            )
            if reply is not None:
                self.ts = str(reply["ts"])
        else:
            reply = await self._call(
                "chat.appendStream", channel=self._channel, ts=self.ts, chunks=chunks
            )
        if reply is not None:
            self._streamed += [c["text"] for c in chunks if c["type"] == "markdown_text"]

    async def _call(self, method: str, **kwargs: Any) -> dict[str, Any] | None:
        """One stream call; None if it failed (the stream falls back, or has expired)."""
        surface = self._surface
        try:
            reply = await surface.streaming.attempt(
                surface.team_id, lambda: self._budget.call(method, **kwargs)
            )
        except SlackError as exc:
            if exc.error == STREAM_EXPIRED and self.ts is not None:
                self._expire()
                return None
            if not means_unavailable(exc.error):
                log.warning("slack.optional_call_failed", method=method, error=exc.error)
            reply = None
        if reply is None:
            self._failed = True  # refused, or streaming is off here: the status shows it
        return reply

    def _expire(self) -> None:
        if not self.expired:
            self.expired = True
            log.info("stream.expired", ts=self.ts, next="chat.update")

    def _refresh(self) -> None:
        """Rewrite an expired stream's message with the answer so far (coalesced)."""
        rendered = self._render(self._answer())
        if rendered is not None and self.ts is not None:
            first = rendered.first
            self._budget.update_progress(
                self._channel, self.ts, text=first.text, blocks=first.blocks
            )

    def _render(self, answer: str) -> AnswerMessages | None:
        """The message as a plain one (the tasks shown so far as a ``plan``, then the
        answer), and the rest of a long answer. None if there is nothing to show."""
        tasks = [Task(c["id"], c["title"], c["status"]) for c in self._tasks.values()]
        return render_answer(answer, title=self._plan_title, tasks=tasks)
