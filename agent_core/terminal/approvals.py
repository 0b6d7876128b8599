"""Approvals in the terminal runner: the person at the terminal answers y/N.

``python -m agent_core run`` asks on stderr and reads the answer from stdin, one call at
a time (calls of one step that need approval queue for the prompt). Only ``y`` or
``yes`` (any case) approves; anything else, or an empty line, denies. When stdin is not a
terminal (a script, a pipe, CI) nobody can answer, so every such call is denied at once;
``--yes`` approves every call without asking.

The prompt shows the arguments in full, as the tool will receive them
(:func:`~agent_core.tools.arguments.shown_arguments`: indented JSON, with invisible
characters and terminal control characters written as ``\\uXXXX``).

stdin is read with the event loop's reader, not a thread: a Ctrl+C (Stop) or an Abort
while the prompt waits ends the wait at once, and no thread is left reading.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, TextIO

from agent_core.tools.arguments import shown_arguments
from agent_core.values.approvals import ApprovalDecision, ApprovalStatus

if TYPE_CHECKING:
    from agent_core.values.approvals import ApprovalRequest

__all__ = ["NOT_A_TERMINAL", "TERMINAL_USER", "TerminalApprovals"]

TERMINAL_USER = "the person at the terminal"
NOT_A_TERMINAL = "threadpilot: stdin is not a terminal (run with --yes to approve tool calls)"
"""Who denied a call when nobody could be asked: the model reads it after "denied by"."""


class TerminalApprovals:
    """Asks y/N on the terminal (:class:`~agent_core.ports.Approvals`)."""

    def __init__(self, *, approve_all: bool, stdin: TextIO, prompt: TextIO) -> None:
        self._approve_all = approve_all
        self._stdin = stdin
        self._prompt = prompt
        self._turn = asyncio.Lock()
        self._buffer = b""

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        if self._approve_all:
            return ApprovalDecision(ApprovalStatus.APPROVED, "--yes")
        if not self._stdin.isatty():
            return ApprovalDecision(ApprovalStatus.DENIED, NOT_A_TERMINAL)
        async with self._turn:
            arguments = shown_arguments(request.arguments)
            question = f"Approve {request.tool} with these arguments?"
            self._prompt.write(f"\n{question}\n{arguments}\n[y/N] ")
            self._prompt.flush()
            answer = (await self._read_line()).strip().lower()
        if answer in ("y", "yes"):
            return ApprovalDecision(ApprovalStatus.APPROVED, TERMINAL_USER)
        return ApprovalDecision(ApprovalStatus.DENIED, TERMINAL_USER)

    async def settle(self, request: ApprovalRequest, status: ApprovalStatus) -> ApprovalDecision:
        return ApprovalDecision(status)

    async def _read_line(self) -> str:
        loop = asyncio.get_running_loop()
        fd = self._stdin.fileno()
        while b"\n" not in self._buffer:
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(fd, _set, readable)
            try:
                await readable
            finally:
                loop.remove_reader(fd)
            chunk = os.read(fd, 1024)
            if not chunk:  # end of input: nobody will answer
                line, self._buffer = self._buffer, b""
                return line.decode(errors="replace")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace")


def _set(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
