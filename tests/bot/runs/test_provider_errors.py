"""A model provider's error text on its way to the thread (docs/security.md).

The app runs for real against llmock, which answers with errors whose body carries a key,
a Slack token and a bearer header, padded to about 60 KB (an error body is read up to
64 KB). Whatever the app sends to the fake Slack (the status while it waits to retry, the
evidence of the failed run) says what happened, masks the keys and tokens, and carries a
bounded clip of the provider's words.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from agent_core.values.redact import MAX_ERROR_CHARS
from tests.bot.harness import block_text
from tests.system.blocks import revision_text

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.harness import Bot

API_KEY = "sk-proj-Zq8Xr4Tn2Wm6Yb1Vc9Kd3Hf7Lp0Gs5"
SLACK_TOKEN = "xoxb-2210987654321-5566778899001-AbCdEfGhIjKlMnOpQrStUvWx"
BEARER_TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJvcmciOiJhY21lIn0.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
PAD = "zyxwv "
ERROR_BODY = (
    f"Incorrect API key provided: {API_KEY}. The workspace token {SLACK_TOKEN} was sent "
    f"with Authorization: Bearer {BEARER_TOKEN} by organisation acme-secret-project. "
    + PAD
    * 10_000
)


async def test_a_providers_error_text_reaches_slack_clipped_and_masked(
    bot: Bot, llm: LLMock
) -> None:
    llm.fail(500, message=ERROR_BODY)  # retried: the status says why the run waits
    llm.fail(401, message=ERROR_BODY)  # not retried: the run fails, and its evidence says why

    _, status = await bot.mention("summarise the incident")
    final = await bot.settled(status)

    sent = json.dumps([call.args for call in bot.slack.calls()])
    for secret in (API_KEY, SLACK_TOKEN, BEARER_TOKEN):
        assert secret not in sent
    # The parts that say what happened are still there.
    evidence = block_text(final)
    assert "HTTP 401" in evidence and "Incorrect API key provided" in evidence
    waiting = [
        text
        for revision in bot.slack.message(status.channel, status.ts).history
        if "Waiting to retry the model" in (text := revision_text(revision))
    ]
    assert waiting and all("HTTP 500" in text for text in waiting)
    # A bounded clip of the provider's words, not tens of KB of them.
    pad_room = MAX_ERROR_CHARS // len(PAD) + 1
    assert evidence.count(PAD.strip()) <= pad_room
    assert all(text.count(PAD.strip()) <= pad_room for text in waiting)
