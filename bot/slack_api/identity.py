"""Who this app is in Slack: its bot user and bot id, as ``auth.test`` answered at start-up.

Asked once per process (:mod:`bot.process.app`), and the answer serves everyone who needs it:
Bolt's authorization of each request, the stripping of our mentions, and the one rule
for which messages are this app's own (:meth:`AppIdentity.wrote`). A message is ours by
our ids, never because it has *a* ``bot_id``: any webhook or workflow has one, and its
words must not become the agent's (docs/architecture.md, The path of a mention).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["AppIdentity", "bot_user_of"]


@dataclass(frozen=True, slots=True)
class AppIdentity:
    """This app's ids in its workspace (from ``auth.test``)."""

    user_id: str
    """The bot user: what a mention of the app names, and the ``user`` of our posts."""
    bot_id: str
    """The bot: the ``bot_id`` of our posts (``""`` if ``auth.test`` gave none)."""
    team_id: str = ""
    team: str = ""
    url: str = ""
    enterprise_id: str | None = None

    @classmethod
    def from_auth_test(cls, answer: Mapping[str, Any]) -> AppIdentity:
        """The identity in ``auth.test``'s answer (its ``user_id`` must be there)."""
        enterprise = answer.get("enterprise_id")
        return cls(
            user_id=str(answer["user_id"]),
            bot_id=str(answer.get("bot_id") or ""),
            team_id=str(answer.get("team_id") or ""),
            team=str(answer.get("team") or ""),
            url=str(answer.get("url") or ""),
            enterprise_id=str(enterprise) if enterprise else None,
        )

    def wrote(self, message: Mapping[str, Any]) -> bool:
        """True if ``message`` (as ``conversations.replies`` gives it) is this app's own."""
        if message.get("user") == self.user_id:
            return True
        return bool(self.bot_id) and message.get("bot_id") == self.bot_id


def bot_user_of(context: Mapping[str, Any], me: AppIdentity) -> str:
    """The app's bot user in the workspace a request comes from: Bolt's authorization of
    the request says (in OAuth mode each workspace's installation has its own), else
    ``me``'s."""
    found = context.get("bot_user_id")
    return found if isinstance(found, str) and found else me.user_id
