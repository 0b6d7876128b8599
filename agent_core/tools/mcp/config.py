"""The MCP servers an admin lists in the JSON file named by ``MCP_CONFIG``.

The file has the shape MCP clients share (Claude Desktop, Claude Code's ``.mcp.json``)::

    {
      "mcpServers": {
        "git":  {"command": "mcp-server-git", "args": ["--repository", "/srv/repo"]},
        "time": {"command": "mcp-server-time", "env": {"TZ": "UTC"}, "cwd": "/tmp"},
        "wiki": {"url": "https://wiki.example.com/mcp",
                 "headers": {"Authorization": "Bearer ${WIKI_TOKEN}"}}
      }
    }

Either kind may say which of its tools wait for a person's approval before each call
(:mod:`agent_core.values.approvals`)::

    "git": {"command": "mcp-server-git", "approval": "unless_read_only",
            "tools": {"git_status": {"approval": "never"}, "git_commit": {"approval": "always"}}}

``approval`` is ``never`` (the default), ``always`` or ``unless_read_only`` (every tool
whose MCP annotations do not say ``readOnlyHint: true``); an entry of ``tools`` (by the
server's own tool name) overrides it for that tool.

An entry with ``command`` is a stdio server (``args``, ``env`` and ``cwd`` optional); one
with ``url`` is a streamable HTTP server (``headers`` optional). ``type`` may say so
(``stdio``, ``http`` or ``streamable-http``); SSE servers are not supported. Any other key
is refused, so a typo cannot silently drop a setting.

Like ``.mcp.json``, the string values of ``command``, ``args``, ``env``, ``url`` and
``headers`` may name variables of threadpilot's own environment: ``${VAR}``, or
``${VAR:-default}`` when VAR may be unset or empty. Nothing else is expanded (``$VAR``
stays as written). A ``${VAR}`` that is unset is an error, not an empty string.

A stdio server does not inherit threadpilot's environment (its Slack and OpenAI keys):
it gets ``HOME``, ``PATH``, ``LOGNAME``, ``SHELL``, ``TERM`` and ``USER``, plus its ``env``.
Without ``cwd`` it starts in an empty directory of its own (:mod:`agent_core.tools.mcp.transport`).
That keeps the app's secrets from it, not one server's from another: stdio servers run as
the same user, so each can read the others' environment through ``/proc``
(:attr:`StdioServer.carries_secrets`; docs/security.md).

What came from a ``${VAR}`` is a secret as far as descriptions go: :attr:`StdioServer.where`,
:attr:`HttpServer.where`, ``repr()`` and every error and log line about a server pass
through the server's :meth:`~StdioServer.redact`, which shows ``${VAR}`` instead of its
value and hides a URL's user info and query (:func:`agent_core.values.redact.redact`).

Every problem raises :class:`~agent_core.values.errors.ConfigError` with one line naming
``MCP_CONFIG`` and the entry.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agent_core.values.approvals import ApprovalRule
from agent_core.values.errors import ConfigError
from agent_core.values.redact import redact

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "SETTING",
    "HttpServer",
    "ServerConfig",
    "StdioServer",
    "load_mcp_config",
    "parse_mcp_config",
]

SETTING = "MCP_CONFIG"

ProtocolMode = Literal["auto", "legacy", "2026-07-28"]
"""How the protocol version is agreed: ``auto`` asks the server (``server/discover``) and
falls back to the ``initialize`` handshake (up to 2025-11-25); ``legacy`` always uses the
handshake; a version pins that version. Set in code (tests); the file has no key for it."""


class _Described:
    """What both kinds of server share: how they are described without their secrets,
    and which of their tools wait for approval."""

    __slots__ = ()
    name: str
    expanded: Mapping[str, str]
    approval: ApprovalRule
    tool_approvals: Mapping[str, ApprovalRule]

    def approval_for(self, tool: str) -> ApprovalRule:
        """The rule for the server's tool named ``tool`` (its own name, not ``S__T``)."""
        return self.tool_approvals.get(tool, self.approval)

    @property
    def where(self) -> str:
        """The command line or URL, as logs, errors and ``--check`` may show it."""
        return self.redact(self._where())

    def redact(self, text: str) -> str:
        """``text`` (about this server) with its ``${VAR}`` values and URL secrets hidden."""
        return redact(text, self.expanded)

    def _where(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.where!r})"


@dataclass(frozen=True, slots=True, repr=False)
class StdioServer(_Described):
    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    protocol: ProtocolMode = "auto"
    approval: ApprovalRule = ApprovalRule.NEVER
    tool_approvals: Mapping[str, ApprovalRule] = field(default_factory=dict)
    expanded: Mapping[str, str] = field(default_factory=dict, compare=False)
    """Each value a ``${VAR}`` gave, and the ``${VAR}`` to show instead."""

    def _where(self) -> str:
        return " ".join([self.command, *self.args])

    @property
    def carries_secrets(self) -> bool:
        """True if its ``env`` or ``args`` hold a value from threadpilot's environment
        (``${VAR}``) or a variable named like a credential: what every other stdio server
        of the process can read through ``/proc/<pid>/environ`` and ``cmdline``."""
        values = [*self.env.values(), *self.args]
        if any(secret in value for secret in self.expanded for value in values):
            return True
        return any(value and _CREDENTIAL.search(name) for name, value in self.env.items())


@dataclass(frozen=True, slots=True, repr=False)
class HttpServer(_Described):
    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    protocol: ProtocolMode = "auto"
    approval: ApprovalRule = ApprovalRule.NEVER
    tool_approvals: Mapping[str, ApprovalRule] = field(default_factory=dict)
    expanded: Mapping[str, str] = field(default_factory=dict, compare=False)
    """Each value a ``${VAR}`` gave, and the ``${VAR}`` to show instead."""

    def _where(self) -> str:
        return self.url


ServerConfig = StdioServer | HttpServer

_STDIO_KEYS = frozenset({"type", "command", "args", "env", "cwd", "approval", "tools"})
_HTTP_KEYS = frozenset({"type", "url", "headers", "approval", "tools"})
_TYPES = {"stdio": _STDIO_KEYS, "http": _HTTP_KEYS, "streamable-http": _HTTP_KEYS}
_SHORTEST_SECRET = 4
"""A value from the environment shorter than this is shown as it is: it could not be a
secret worth the name, and hiding each occurrence of ``1`` or ``on`` would garble the text
around it."""
_CREDENTIAL = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)
"""An environment variable named like a credential (``GITHUB_TOKEN``, ``API_KEY``...)."""
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def load_mcp_config(
    path: str | Path, environ: Mapping[str, str] | None = None
) -> tuple[ServerConfig, ...]:
    """The servers listed in the file at ``path`` (the value of ``MCP_CONFIG``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(SETTING, f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ConfigError(SETTING, f"{path} is not valid JSON: {exc}") from exc
    return parse_mcp_config(document, os.environ if environ is None else environ)


def parse_mcp_config(document: object, environ: Mapping[str, str]) -> tuple[ServerConfig, ...]:
    """The servers of an already-decoded ``{"mcpServers": {...}}`` document."""
    if not isinstance(document, dict) or not isinstance(document.get("mcpServers"), dict):
        raise ConfigError(SETTING, 'the file must hold an object {"mcpServers": {"NAME": {...}}}')
    servers: dict[str, Any] = document["mcpServers"]
    return tuple(_server(name, entry, environ) for name, entry in servers.items())


def _server(name: str, entry: object, environ: Mapping[str, str]) -> ServerConfig:
    if not name.strip():
        raise ConfigError(SETTING, "a server has an empty name")
    if not isinstance(entry, dict):
        raise _bad(name, "must be an object with a command or a url")
    kind = entry.get("type")
    if kind is not None and kind not in _TYPES:
        raise _bad(name, f"type {kind!r} is not supported (use stdio, http or streamable-http)")
    if ("command" in entry) == ("url" in entry):
        raise _bad(name, "needs exactly one of command (stdio) or url (streamable HTTP)")
    allowed = _STDIO_KEYS if "command" in entry else _HTTP_KEYS
    if kind is not None and _TYPES[kind] is not allowed:
        given = "command" if "command" in entry else "url"
        raise _bad(name, f"type {kind!r} does not go with a {given}")
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise _bad(name, f"unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
    expand = _Expander(name, environ)
    approval = _rule(name, "approval", entry.get("approval", ApprovalRule.NEVER.value))
    tool_approvals = _tool_rules(name, entry.get("tools", {}))
    if "command" in entry:
        return StdioServer(
            name=name,
            command=expand(_text(name, "command", entry["command"])),
            args=tuple(expand(a) for a in _texts(name, "args", entry.get("args", []))),
            env={k: expand(v) for k, v in _pairs(name, "env", entry.get("env", {})).items()},
            cwd=_text(name, "cwd", entry["cwd"]) if "cwd" in entry else None,
            approval=approval,
            tool_approvals=tool_approvals,
            expanded=expand.expanded,
        )
    url = expand(_text(name, "url", entry["url"]))
    if not url.startswith(("http://", "https://")):
        shown = redact(url, expand.expanded)[:40]
        raise _bad(name, f"url must start with http:// or https://, not {shown!r}")
    headers = _pairs(name, "headers", entry.get("headers", {}))
    return HttpServer(
        name=name,
        url=url,
        headers={k: expand(v) for k, v in headers.items()},
        approval=approval,
        tool_approvals=tool_approvals,
        expanded=expand.expanded,
    )


class _Expander:
    """``${VAR}`` and ``${VAR:-default}`` from threadpilot's environment."""

    def __init__(self, server: str, environ: Mapping[str, str]) -> None:
        self._server = server
        self._environ = environ
        self.expanded: dict[str, str] = {}
        """Each value given so far, and the ``${VAR}`` it came from."""

    def __call__(self, value: str) -> str:
        return _VARIABLE.sub(self._value, value)

    def _value(self, match: re.Match[str]) -> str:
        variable, default = match.group(1), match.group(2)
        value = self._environ.get(variable)
        if not value and default is not None:
            return default  # POSIX ":-": unset or empty takes the default (the file's own)
        if value is None:
            raise _bad(self._server, f"${{{variable}}} is not set in the environment")
        if len(value) >= _SHORTEST_SECRET:
            self.expanded.setdefault(value, f"${{{variable}}}")
        return value


def _text(server: str, key: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise _bad(server, f"{key} must be a non-empty string")
    return value


def _texts(server: str, key: str, value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(server, f"{key} must be a list of strings")
    return value


def _pairs(server: str, key: str, value: object) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _bad(server, f"{key} must be an object of strings")
    return value


def _rule(server: str, key: str, value: object) -> ApprovalRule:
    if isinstance(value, str) and value in ApprovalRule.__members__.values():
        return ApprovalRule(value)
    allowed = ", ".join(r.value for r in ApprovalRule)
    raise _bad(server, f"{key} must be one of {allowed}, not {repr(value)[:40]}")


def _tool_rules(server: str, value: object) -> dict[str, ApprovalRule]:
    if not isinstance(value, dict):
        raise _bad(server, 'tools must be an object {"TOOL": {"approval": ...}}')
    rules: dict[str, ApprovalRule] = {}
    for tool, settings in value.items():
        if not isinstance(settings, dict) or set(settings) != {"approval"}:
            raise _bad(server, f'tools[{tool!r}] must be an object {{"approval": ...}}')
        rules[tool] = _rule(server, f"tools[{tool!r}].approval", settings["approval"])
    return rules


def _bad(server: str, problem: str) -> ConfigError:
    return ConfigError(SETTING, f"server {server!r}: {problem}")
