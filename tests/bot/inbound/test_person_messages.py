"""The one rule for what a message event asks of the app: every listener reads it here, so
the once-only check, the mention listeners and steering cannot disagree about an event."""

from __future__ import annotations

from typing import Any

import pytest

from bot.inbound.person_messages import Asks, from_a_person, mentions_app, what_it_asks

BOT = "U0BOT"
PERSON = "U0PERSON"


def event(kind: str = "message", text: str = "hello", **fields: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"type": kind, "user": PERSON, "text": text, "ts": "2.0"}
    found.update(channel="C1", channel_type="channel")
    found.update(fields)
    return {k: v for k, v in found.items() if v is not None}


@pytest.mark.parametrize(
    ("the_event", "asks"),
    [
        (event("app_mention", f"<@{BOT}> go"), Asks.RUN),
        (event("app_mention", f"<@{BOT}> go", thread_ts="1.0"), Asks.RUN),
        (event(channel_type="im"), Asks.RUN),
        (event(text=f"<@{BOT}> go", channel_type="im"), Asks.RUN),  # no app_mention in a DM
        (event(channel_type="mpim"), Asks.RUN),
        (event(text=f"<@{BOT}> go", channel_type="mpim"), Asks.NOTHING),  # its app_mention acts
        (event(thread_ts="1.0"), Asks.THREAD_REPLY),
        (event(thread_ts="1.0", subtype="thread_broadcast"), Asks.THREAD_REPLY),
        (event(text=f"<@{BOT}> go", thread_ts="1.0"), Asks.NOTHING),  # its app_mention acts
        (event(text=f"<@{BOT}|threadpilot> go", thread_ts="1.0"), Asks.NOTHING),
        (event(), Asks.NOTHING),  # a channel's chatter
        (event(thread_ts="1.0", subtype="message_changed"), Asks.NOTHING),  # an edit
        (event(thread_ts="1.0", subtype="channel_join"), Asks.NOTHING),
        (event(thread_ts="1.0", bot_id="B0OTHER"), Asks.NOTHING),  # another app
        (event("app_mention", f"<@{BOT}> go", bot_id="B0OTHER"), Asks.NOTHING),
        (event(thread_ts="1.0", user=BOT), Asks.NOTHING),  # our own post
        (event(channel_type="im", user=None), Asks.NOTHING),  # nobody wrote it
        (event("reaction_added"), Asks.NOTHING),
    ],
)
def test_what_a_message_event_asks(the_event: dict[str, Any], asks: Asks) -> None:
    assert what_it_asks(the_event, BOT) is asks


def test_a_thread_message_is_a_persons_when_a_person_wrote_it() -> None:
    written = [
        {"user": PERSON, "text": "plain", "ts": "1.0"},
        {"user": PERSON, "text": "also to the channel", "subtype": "thread_broadcast"},
        {"user": BOT, "text": "our own answer"},
        {"user": "U0OTHERBOT", "bot_id": "B0OTHER", "text": "another app"},
        {"user": PERSON, "subtype": "channel_join", "text": "joined"},
        {"bot_id": "B0HOOK", "subtype": "bot_message", "text": "a webhook"},
    ]
    assert [m["text"] for m in written if from_a_person(m, BOT)] == [
        "plain",
        "also to the channel",
    ]


def test_a_mention_is_the_apps_own_id_only() -> None:
    assert mentions_app(f"hi <@{BOT}>", BOT)
    assert mentions_app(f"hi <@{BOT}|threadpilot>", BOT)
    assert not mentions_app(f"hi <@{BOT}1>", BOT)  # a longer id is someone else
    assert not mentions_app(f"hi {BOT}", BOT)
