"""``python -m bot --forget-user UXXXX``: delete one person's runs, for a request to erase
their data (docs/operations.md, Retention and backups).

Deletes, on the database in ``DATABASE_URL``, every run the person started that has ended
(whatever its age), with its checkpoint, stop requests, audit events and guidance, and
what else they wrote: their replies to other people's runs, and which threads they wrote
in. Their live runs, and those with a resume ahead, are kept and counted: stop them (App
Home), then run it again. Prints one line; exit status 0, or 2 when it could not be done.

With ``--team TXXXX`` only what they did in that workspace goes (several workspaces
share one database in OAuth mode, each its own data); without it, in every workspace.
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, TextIO

from agent_core import StorageError
from agent_core.stores.factory import open_store

if TYPE_CHECKING:
    from bot.config.settings import Settings

__all__ = ["forget_user"]

_USER_ID = re.compile(r"[UW][A-Z0-9]{2,}")
"""A Slack user id (``U...``, or ``W...`` on Enterprise Grid)."""
_TEAM_ID = re.compile(r"T[A-Z0-9]{2,}")
"""A Slack workspace (team) id."""


async def forget_user(
    settings: Settings, user: str, out: TextIO = sys.stdout, *, team: str | None = None
) -> int:
    """Forget ``user``'s runs (in workspace ``team`` only, if given); one line on ``out``
    (or on stderr, failing), the exit status."""
    if not _USER_ID.fullmatch(user):
        return _failed(f"--forget-user wants a Slack user id such as U012AB3CD, not {user!r}")
    if team is not None and not _TEAM_ID.fullmatch(team):
        return _failed(f"--team wants a Slack team id such as T012AB3CD, not {team!r}")
    try:
        store = await open_store(settings.DATABASE_URL, pool_size=1)
        try:
            forgotten = await store.forget_requester(user, team=team)
        finally:
            await store.close()
    except StorageError as exc:
        return _failed(f"nothing was deleted for {user}: {exc}")
    where = f" in {team}" if team is not None else ""
    line = (
        f"{user}{where}: {forgotten.runs:,} ended run{'' if forgotten.runs == 1 else 's'} deleted"
    )
    if forgotten.kept:
        line += (
            f"; {forgotten.kept:,} kept (live, or with a resume ahead): stop them, then run "
            "this again"
        )
    print(line, file=out, flush=True)
    return 0


def _failed(problem: str) -> int:
    print(f"threadpilot: {problem}", file=sys.stderr, flush=True)
    return 2
