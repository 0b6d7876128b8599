"""Helpers for the MCP tests: the real servers' configs, our fake server, process checks.

The real servers (``mcp-server-time``, ``mcp-server-git``) and our fake
(:mod:`tests.fakes.mcp_server`) run with this interpreter, so they use the venv's
packages. Process checks are Linux's: ``/proc`` to find a process's children, and a
pidfd to wait for a process to exit (one that has exited but is not yet reaped counts as
gone).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from agent_core.tools.mcp import StdioServer

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
TIME_SERVER = {"command": PY, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}
"""An ``MCP_CONFIG`` entry for the real ``mcp-server-time``, run with this interpreter."""
WAIT_S = 10.0
PROMPT_S = 1.0
"""An Abort that takes longer than this to end the run is not "at once"."""


def time_server(name: str = "time") -> StdioServer:
    return StdioServer(name, PY, ("-m", "mcp_server_time", "--local-timezone", "UTC"))


def git_server(repository: Path, name: str = "git") -> StdioServer:
    return StdioServer(name, PY, ("-m", "mcp_server_git", "--repository", str(repository)))


def make_repository(path: Path) -> Path:
    """A git repository at ``path`` with one commit ("First notes")."""

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    (path / "notes.txt").write_text("remember the milk\n")
    git("add", "notes.txt")
    git("-c", "user.name=Ada", "-c", "user.email=ada@example.com", "commit", "-qm", "First notes")
    return path


def fake_stdio_server(name: str = "fake") -> StdioServer:
    return StdioServer(
        name, PY, ("-m", "tests.fakes.mcp_server"), env={"PYTHONPATH": str(ROOT)}, cwd=str(ROOT)
    )


def children_of(pid: int) -> set[int]:
    """The live child processes of ``pid``."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _stat(int(entry)) is not None:
            state, parent = _stat(int(entry)) or ("", 0)
            if parent == pid and state != "Z":
                found.add(int(entry))
    return found


def running(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def _stat(pid: int) -> tuple[str, int] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def _settle(exited: asyncio.Future[None]) -> None:
    if not exited.done():
        exited.set_result(None)


async def until_gone(pids: set[int], timeout_s: float = WAIT_S) -> None:
    """Wait (bounded) until every one of ``pids`` has exited, on each one's pidfd (readable
    once the process has ended, reaped or not): no polling, even for a stranger's child."""
    loop = asyncio.get_running_loop()
    exits: dict[int, asyncio.Future[None]] = {}
    fds: list[int] = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue  # gone and reaped already
        fds.append(fd)
        exited = exits[pid] = loop.create_future()
        loop.add_reader(fd, _settle, exited)
    try:
        async with asyncio.timeout(timeout_s):
            await asyncio.gather(*exits.values())
    except TimeoutError:
        alive = sorted(pid for pid, f in exits.items() if not f.done())
        raise TimeoutError(f"still running after {timeout_s}s: {alive}") from None
    finally:
        for fd in fds:
            loop.remove_reader(fd)
            os.close(fd)
