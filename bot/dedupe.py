"""Drop repeated Events API deliveries (SPEC.md section 2, SLACK_NOTES.md).

Slack re-sends an event it thinks was not acknowledged in time (``X-Slack-Retry-Num``),
and may deliver one twice. Every delivery carries an ``event_id``; a repeat is
acknowledged and dropped here, before any listener can start a second run.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import structlog
from slack_bolt.response import BoltResponse

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["EventDeduper"]

log = structlog.get_logger("bot.dedupe")


class EventDeduper:
    def __init__(self, capacity: int = 10_000) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._capacity = capacity

    def first_time(self, event_id: str) -> bool:
        if event_id in self._seen:
            self._seen.move_to_end(event_id)
            return False
        self._seen[event_id] = None
        if len(self._seen) > self._capacity:
            self._seen.popitem(last=False)
        return True

    async def middleware(
        self, body: dict[str, Any], next: Callable[[], Awaitable[None]]
    ) -> BoltResponse | None:
        event_id = body.get("event_id") if body.get("type") == "event_callback" else None
        if event_id and not self.first_time(str(event_id)):
            log.info(
                "event.duplicate_dropped",
                event_id=event_id,
                event_type=(body.get("event") or {}).get("type"),
            )
            return BoltResponse(status=200, body="")
        await next()
        return None
