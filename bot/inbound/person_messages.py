"""Which Slack messages are a person's, and what a person's message asks of the app.

One home for the rule every listener shares, so they cannot disagree: the once-only check
on deliveries (:mod:`bot.inbound.dedupe`, which records the events that can act), the
mention listeners that start runs (:mod:`bot.handlers.mentions`), steering
(:mod:`bot.handlers.steering`, which takes a reply in a live run's thread) and who wrote in
a thread (:mod:`bot.inbound.thread_history`).

A person's message is a plain one or a thread reply also sent to the channel (subtype
``thread_broadcast``); an edit, a deletion, a join, another app's post (``bot_id``) or the
app's own post is not.

Slack sends a message that mentions the app twice: as ``app_mention`` and as ``message``
(except in a DM, where only ``message`` comes). The ``app_mention`` is the one that acts,
so the other asks nothing.
"""

from __future__ import annotations

import enum
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["PERSON_SUBTYPES", "Asks", "from_a_person", "mentions_app", "what_it_asks"]

PERSON_SUBTYPES = frozenset({None, "thread_broadcast"})
"""A person's new message: plain, or a thread reply also sent to the channel."""


class Asks(enum.Enum):
    """What a person's message event asks of the app."""

    RUN = "run"
    """A mention, a DM, or a message in a group DM the app is in: a run (or, in a thread
    with a live run, guidance for it)."""
    THREAD_REPLY = "thread_reply"
    """A reply in a channel thread without a mention: it continues the thread's run if the
    thread had one (guidance while it is live), and is nobody's business otherwise."""
    NOTHING = "nothing"
    """Not a person's message, channel chatter, or the twin of an ``app_mention``."""


def from_a_person(message: Mapping[str, Any], bot_user_id: str) -> bool:
    """True if ``message`` (an event, or a message ``conversations.replies`` gives) is a
    person's new message: written by someone, not by an app and not by the app itself."""
    user = message.get("user")
    return (
        message.get("subtype") in PERSON_SUBTYPES
        and not message.get("bot_id")
        and isinstance(user, str)
        and bool(user)
        and user != bot_user_id
    )


def mentions_app(text: str, bot_user_id: str) -> bool:
    """True if ``text`` mentions ``bot_user_id`` (``<@U…>``, or ``<@U…|name>``)."""
    return re.search(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>", text) is not None


def what_it_asks(event: Mapping[str, Any], bot_user_id: str) -> Asks:
    """What ``event`` (a Slack ``message`` or ``app_mention`` event) asks of the app."""
    kind = event.get("type")
    if kind not in ("app_mention", "message") or not from_a_person(event, bot_user_id):
        return Asks.NOTHING
    if kind == "app_mention":
        return Asks.RUN
    channel_type = event.get("channel_type")
    if channel_type == "im":
        return Asks.RUN  # a DM: no app_mention comes for it
    if mentions_app(str(event.get("text") or ""), bot_user_id):
        return Asks.NOTHING  # its app_mention event is the one that acts
    if channel_type == "mpim":
        return Asks.RUN
    thread_ts = event.get("thread_ts")
    if isinstance(thread_ts, str) and thread_ts and thread_ts != event.get("ts"):
        return Asks.THREAD_REPLY
    return Asks.NOTHING  # a channel's chatter
