"""Secrets taken out of text that people read: logs, errors, ``--check``, the thread.

:func:`redact` is the one rule (docs/security.md). It replaces, in this order:

- each value the caller knows came from the environment (an MCP entry's ``${VAR}``
  values) with the name it came from, ``${VAR}``;
- a URL's user info and query (``https://***@host/path?***``), wherever a URL appears;
- anything shaped like a key or token: OpenAI and Anthropic keys (``sk-...``), Slack
  tokens (``xoxb-``, ``xoxp-``, ``xapp-``...), GitHub and AWS keys, OpenAI organisation
  and project ids, JSON web tokens, what follows ``Bearer``, the value of a
  ``key=value`` / ``"key": "value"`` pair whose name says key, token, secret or
  password, and long runs of hex or of mixed-case letters and digits (base64). A
  ``${VAR}`` left by the first step is shown as it is.

:func:`public_error` is a provider's error text as the thread may show it: redacted,
then clipped to :data:`MAX_ERROR_CHARS`.

:func:`public_url` is a configured URL (``OPENAI_BASE_URL``, ``SLACK_API_URL``...) as
logs, errors and ``--check`` name it: without its user info, and with the value of each
query parameter whose name says it is a credential masked (``?api-key=***``); the rest
stays readable, so the person can tell which endpoint is meant.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["MASK", "MAX_ERROR_CHARS", "public_error", "public_url", "redact"]

MASK = "***"
MAX_ERROR_CHARS = 400
"""The longest provider error text that is shown; room for the provider's sentence."""

_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>`]+")
_PREFIXED = re.compile(
    r"\b(sk-(?:proj-|ant-|svcacct-|admin-)?+|xox[abeoprs]-|xapp-|gh[pousr]_|github_pat_"
    r"|org-|proj_|AKIA|ASIA)[A-Za-z0-9_*.-]{6,}"
)
_BEARER = re.compile(r"\b(Bearer)\s+(?!\$\{)[^\s'\",;]{4,}", re.IGNORECASE)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]*)?")
_NAMED = re.compile(
    r"""((?:api[_-]?key|access[_-]?key|token|secret|password|passwd|pwd|authorization)"""
    r"""["']?\s*[:=]\s*["']?)(?!\$\{|\*\*\*|Bearer\b)[^\s'",;&]{4,}""",
    re.IGNORECASE,
)
_SECRET_PARAM = re.compile(
    r"key|token|secret|passw|pwd|sig|auth|credential|session|code", re.IGNORECASE
)
"""A query parameter whose value is a credential, by its name (``api-key``, ``key``,
``access_token``, ``sig``, ``X-Amz-Signature``, ``auth``, ``code``...)."""
_HEX = re.compile(r"\b[0-9a-fA-F]{32,}\b")
_RUN = re.compile(r"[A-Za-z0-9+/_=-]{32,}")


def redact(text: str, known: Mapping[str, str] | None = None) -> str:
    """``text`` with its secrets masked. ``known``: secret values and what to show instead
    of each (an MCP entry's ``${VAR}`` values and the ``${VAR}`` they came from)."""
    # Longest first, so a value that contains another is replaced whole.
    for value, shown in sorted((known or {}).items(), key=lambda item: -len(item[0])):
        if value:
            text = text.replace(value, shown)
    text = _URL.sub(_url_without_credentials, text)
    text = _PREFIXED.sub(lambda m: m.group(1) + MASK, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    text = _JWT.sub(MASK, text)
    text = _NAMED.sub(lambda m: m.group(1) + MASK, text)
    text = _HEX.sub(MASK, text)
    return _RUN.sub(_masked_run, text)


def public_error(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """A provider's error text as the thread may show it: redacted, on one line, clipped
    to ``limit`` characters (masked first, so a cut cannot leave half a key showing)."""
    line = " ".join(redact(text).split())
    if len(line) <= limit:
        return line
    return f"{line[: limit - 1].rstrip()}…"


def public_url(url: str) -> str:
    """``url`` as it may be printed or logged: no user info, and the value of each query
    parameter named like a credential (:data:`_SECRET_PARAM`) masked; the fragment too.
    Text that is not a URL is returned redacted (:func:`redact`)."""
    try:
        parts = urlsplit(url.strip())
        host = parts.netloc.rpartition("@")[2]
    except ValueError:
        return redact(url.rpartition("@")[2])
    if not parts.scheme or not host:
        _, at, after = url.rpartition("@")
        return redact(f"{MASK}@{after}" if at else url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = urlencode(
        [(k, MASK if _SECRET_PARAM.search(k) else redact(v)) for k, v in pairs],
        safe="*",
    )
    fragment = MASK if parts.fragment else ""
    return urlunsplit((parts.scheme, host, parts.path, query, fragment))


def _url_without_credentials(match: re.Match[str]) -> str:
    url = match.group(0)
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL after all (a bad port, an unclosed bracket)
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rpartition('@')[2]}"
    query = MASK if parts.query else ""
    fragment = MASK if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def _masked_run(match: re.Match[str]) -> str:
    """A long run of base64 characters is a secret when it mixes upper case, lower case
    and digits, as random keys do; a path or a long word does not."""
    run = match.group(0)
    if any(c.isdigit() for c in run) and any(c.islower() for c in run):
        if any(c.isupper() for c in run):
            return MASK
    return run
