"""Keeping the app's secrets from the processes it starts (docs/security.md).

A stdio MCP server runs as the app's own user. Its scrubbed environment
(:mod:`agent_core.tools.mcp.config`) and its own empty working directory
(:mod:`agent_core.tools.mcp.transport`) keep the settings out of its reach, except through
``/proc``: a process may read ``/proc/<pid>/environ``, ``cmdline`` and ``mem`` of any
process of its own user, its parent included. :func:`make_undumpable` closes that door:
a process that is not dumpable has its ``/proc`` files owned by root, and the kernel lets
only a process with ``CAP_SYS_PTRACE`` into them. Both entry points call it first thing
(``python -m bot``, ``python -m agent_core run``). It also means no core dumps.

That protects nothing when the app runs as root: its children are root too. So the app
says so once at start-up (:func:`warn_if_root`); the container image runs as an ordinary
user.
"""

from __future__ import annotations

import ctypes
import os
import sys

import structlog

__all__ = ["make_undumpable", "runs_as_root", "warn_if_root"]

_PR_SET_DUMPABLE = 4
"""From linux/prctl.h."""

log = structlog.get_logger("agent_core.process.isolation")


def make_undumpable() -> bool:
    """Mark this process not dumpable (Linux ``prctl(PR_SET_DUMPABLE, 0)``), so processes
    it starts cannot read its memory or environment through ``/proc``. False where that
    is not possible (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)


def runs_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def warn_if_root() -> None:
    """One warning when this process runs as root: its tool servers could read its
    secrets, and what to do about it."""
    if runs_as_root():
        log.warning(
            "secrets.readable_by_tool_servers",
            reason="threadpilot runs as root, so the MCP servers it starts do too, and "
            "root can read its environment (the Slack and model keys, DATABASE_URL) "
            "through /proc",
            fix="run it as an ordinary user (the container image does: USER threadpilot); "
            "run powerful tool servers as their own user or container, over streamable "
            "HTTP (docs/security.md)",
        )
