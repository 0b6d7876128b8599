"""Who may stop or abort a run (``STOP_POLICY``, ``ADMIN_USER_IDS``; SPEC.md section 2)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.settings import StopPolicy

if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = ["may_stop"]


def may_stop(
    user: str,
    *,
    policy: StopPolicy,
    requester: str,
    admins: Collection[str],
    participants: Collection[str] = (),
) -> bool:
    """True if ``user`` may press Stop or Abort on a run started by ``requester``."""
    if user == requester or user in admins:
        return True
    if policy is StopPolicy.ANYONE:
        return True
    return policy is StopPolicy.PARTICIPANTS and user in participants
