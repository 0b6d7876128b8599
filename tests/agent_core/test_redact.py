"""What :func:`agent_core.values.redact.redact` hides and what it leaves readable."""

from __future__ import annotations

import pytest

from agent_core.values.redact import MASK, MAX_ERROR_CHARS, public_error, public_url, redact

HIDDEN = [
    ("Incorrect API key provided: sk-proj-AbCdEf1234567890abcdEFGH.", "sk-proj-AbCdEf"),
    ("Incorrect API key provided: sk-abc***************************wxyz", "wxyz"),
    ("invalid x-api-key sk-ant-api03-Zz9Yy8Xx7Ww6Vv5Uu4", "Zz9Yy8"),
    ("token xoxb-1111111111-2222222222-AbCdEfGhIjKl was revoked", "AbCdEfGhIjKl"),
    ("xapp-1-A0123456789-0123456789012-abcdef0123456789", "abcdef0123456789"),
    ("user token xoxp-1111-2222-3333-aaaa", "3333-aaaa"),
    ("Authorization: Bearer abc.def-ghi_jkl", "abc.def-ghi_jkl"),
    ('{"api_key": "plainsecretvalue"}', "plainsecretvalue"),
    ("password=hunter22 rejected", "hunter22"),
    ("in organization org-Q1w2E3r4T5y6U7i8 on tokens per min", "Q1w2E3r4T5y6U7i8"),
    ("request 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 failed", "9f86d0"),
    ("blob dGhpcyBpcyBhIHNlY3JldCBrZXkgdmFsdWUgMTIzNDU2Nzg5 sent", "dGhpcyBp"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig", "eyJzdWIiOiIxIn0"),
    ("see https://admin:pa55word@db.example.com:5432/app?sslkey=abc#frag", "pa55word"),
    ("see https://db.example.com/app?sslkey=abcdef", "sslkey=abcdef"),
    ("AKIAIOSFODNN7EXAMPLE is not allowed", "IOSFODNN7EXAMPLE"),
]


@pytest.mark.parametrize(("text", "secret"), HIDDEN)
def test_keys_and_tokens_are_masked(text: str, secret: str) -> None:
    redacted = redact(text)

    assert secret not in redacted
    assert MASK in redacted


READABLE = [
    "This model's maximum context length is 128000 tokens. However, your messages "
    "resulted in 130123 tokens. Please reduce the length of the messages.",
    "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used 29000, "
    "Requested 2000. Please try again in 2s.",
    "FileNotFoundError: [Errno 2] No such file or directory: '/srv/repositories/project2024'",
    "the MCP server 'git' (mcp-server-git --repository ${REPO_PATH}) could not start",
    "Authorization: Bearer ${WIKI_TOKEN}",
    "https://wiki.example.com/mcp",
    "model endpoint answered HTTP 503: upstream connect error or disconnect/reset",
]


@pytest.mark.parametrize("text", READABLE)
def test_text_without_secrets_is_left_as_it_is(text: str) -> None:
    assert redact(text) == text


def test_known_values_are_shown_by_the_name_they_came_from() -> None:
    known = {"s3cret-value": "${TOKEN}", "s3cret-value-longer": "${LONG}"}

    redacted = redact("a s3cret-value-longer and a s3cret-value", known)

    assert redacted == "a ${LONG} and a ${TOKEN}"


def test_redacting_twice_changes_nothing_more() -> None:
    once = redact("https://u:p4ss@h.example/x?t=1 sk-proj-AbCdEf1234567890abcd Bearer zzzzzz")

    assert redact(once) == once


def test_a_public_error_is_masked_before_it_is_clipped_and_fits_on_one_line() -> None:
    key = "sk-proj-" + "Ab1" * 20
    text = "x" * (MAX_ERROR_CHARS - 10) + f" {key}\n" + "more " * 10_000

    shown = public_error(text)

    assert len(shown) <= MAX_ERROR_CHARS
    assert "\n" not in shown
    assert "Ab1Ab1" not in shown  # no fragment of the key survives the cut


PUBLIC_URLS = [
    (
        "https://user:pa55word@gw.example.com/openai/v1?api-version=2025-01&api-key=abc123",
        "https://gw.example.com/openai/v1?api-version=2025-01&api-key=***",
    ),
    ("https://gw.example.com/v1?key=abc&token=def", "https://gw.example.com/v1?key=***&token=***"),
    (
        "https://blob.example.com/x?sv=2024&sig=AbC%2Bdef&X-Amz-Signature=ff00",
        "https://blob.example.com/x?sv=2024&sig=***&X-Amz-Signature=***",
    ),
    ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1"),
    ("https://only-user@host.example.com/", "https://host.example.com/"),
    ("https://host.example.com/#access_token=abc", "https://host.example.com/#***"),
    ("postgresql:user:pass@host/db", "***@host/db"),
]


@pytest.mark.parametrize(("url", "shown"), PUBLIC_URLS)
def test_a_public_url_drops_user_info_and_masks_credential_parameters(url: str, shown: str) -> None:
    assert public_url(url) == shown
