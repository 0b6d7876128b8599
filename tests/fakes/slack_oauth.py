"""Slack's side of OAuth for `FakeSlack`: the authorize page, `oauth.v2.access` (a code,
or a refresh token), the tokens it hands out, token rotation and revocation.

Installable: two standalone workspaces (`TEAM_A`, `TEAM_B`) and one Enterprise Grid
organisation (`ORG`, installed org-wide) with two workspaces (`ORG_WORKSPACES`). The
authorize page stands for the person clicking Allow: it redirects at once to the
`redirect_uri` with a fresh single-use code for the next target the test chose
(`approve_next`), or with `error=access_denied` (`deny_next`).

With `rotation` on, an installation's access token expires `expires_in` seconds after it
is issued, and each `grant_type=refresh_token` exchange returns a new access token and a
new refresh token: the old refresh token stops working at once (Slack's rule), and the
old access token keeps working until it expires. Every token Slack would refuse
(revoked, expired) is refused here with Slack's error.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from dataclasses import dataclass, field, replace
from urllib.parse import urlencode

from aiohttp import web

from tests.fakes.slack_messages import Refused
from tests.fakes.slack_workspace import DEFAULT_WORKSPACE, Json, Workspace

__all__ = [
    "CLIENT_ID",
    "CLIENT_SECRET",
    "ORG",
    "ORG_WORKSPACES",
    "TEAM_A",
    "TEAM_B",
    "FakeOAuth",
    "Grant",
    "Target",
]

CLIENT_ID = "1111.2222"
CLIENT_SECRET = "fake-client-secret"


@dataclass(frozen=True)
class Target:
    """Where a person installs the app: a workspace, or an organisation (org-wide)."""

    team_id: str | None
    team_name: str | None
    enterprise_id: str | None = None
    enterprise_name: str | None = None
    bot_user_id: str = DEFAULT_WORKSPACE.bot_user_id
    """The app's bot user there: each installation has its own, as in Slack."""
    bot_id: str = DEFAULT_WORKSPACE.bot_id

    @property
    def org_wide(self) -> bool:
        return self.team_id is None


TEAM_A = Target("T0TPTEAMA01", "Team A", bot_user_id="U0TPBOTA001", bot_id="B0TPBOTA001")
TEAM_B = Target("T0TPTEAMB01", "Team B", bot_user_id="U0TPBOTB001", bot_id="B0TPBOTB001")
ORG = Target(
    None, None, "E0TPORG0001", "Example Org", bot_user_id="W0TPBOTORG1", bot_id="B0TPBOTORG1"
)
ORG_WORKSPACES = ("T0TPORGW001", "T0TPORGW002")


@dataclass
class Grant:
    """What one installation holds now: its tokens and their lives."""

    target: Target
    access_tokens: dict[str, float | None] = field(default_factory=dict)
    """Access token -> when it expires (`time.time()`), None: never."""
    refresh_token: str | None = None
    revoked: bool = False


class FakeOAuth:
    def __init__(
        self,
        *,
        rotation: bool = False,
        expires_in: int = 43_200,
        refreshed_expires_in: int | None = None,
    ) -> None:
        self.rotation = rotation
        self.expires_in = expires_in
        self.refreshed_expires_in = refreshed_expires_in or expires_in
        """The life of a token a refresh gives."""
        self.refuse_refreshes = False
        """While True, every refresh is refused (`invalid_refresh_token`)."""
        self.redirect_uris: list[str] = []
        """The app's registered redirect URLs (empty: any is accepted)."""
        self._next: deque[Target | str] = deque()
        self._codes: dict[str, Target] = {}
        self._grants: dict[Target, Grant] = {}
        self._by_token: dict[str, Grant] = {}
        self._by_refresh: dict[str, Grant] = {}
        self._spent_refresh: set[str] = set()
        self._serial = itertools.count(1)
        self.authorize_requests: list[Json] = []
        """The query of each request the authorize page got."""
        self.refreshes: list[tuple[str, bool]] = []
        """Each refresh token presented, and whether it was taken."""

    # -- scripting ---------------------------------------------------------------------

    def approve_next(self, target: Target) -> None:
        """The next visit to the authorize page is allowed, installing into `target`."""
        self._next.append(target)

    def deny_next(self, error: str = "access_denied") -> None:
        self._next.append(error)

    def revoke(self, target: Target) -> None:
        """Revoke every token of `target`'s installation (`tokens_revoked`)."""
        self._grants[target].revoked = True

    def grant(self, target: Target) -> Grant:
        return self._grants[target]

    def current_token(self, target: Target) -> str:
        """The latest access token issued to `target`."""
        return list(self._grants[target].access_tokens)[-1]

    def installed_where(self, token: str | None) -> Target | None:
        grant = self._by_token.get(token or "")
        return None if grant is None else grant.target

    def acting_as(self, token: str | None, team_id: str) -> Workspace | None:
        """The app as the state should see it for a call with ``token`` (its bot user
        and bot in that installation), or None for a token not issued here."""
        target = self.installed_where(token)
        if target is None:
            return None
        return replace(
            DEFAULT_WORKSPACE,
            team_id=target.team_id or team_id,
            bot_user_id=target.bot_user_id,
            bot_id=target.bot_id,
            # An org-wide install sees the org's people as the org's (users.info's
            # enterprise_user), whichever of its workspaces they belong to.
            enterprise_id=target.enterprise_id,
        )

    # -- HTTP --------------------------------------------------------------------------

    async def authorize(self, request: web.Request) -> web.Response:
        query = dict(request.query)
        self.authorize_requests.append(query)
        if query.get("client_id") != CLIENT_ID:
            return web.Response(status=400, text="invalid_client_id")
        redirect = query.get("redirect_uri") or (self.redirect_uris or [""])[0]
        if not redirect or (self.redirect_uris and redirect not in self.redirect_uris):
            return web.Response(status=400, text="bad_redirect_uri")
        choice = self._next.popleft() if self._next else TEAM_A
        if isinstance(choice, str):
            answer = {"error": choice, "state": query.get("state", "")}
        else:
            code = f"code-{next(self._serial)}"
            self._codes[code] = choice
            answer = {"code": code, "state": query.get("state", "")}
        raise web.HTTPFound(f"{redirect}?{urlencode(answer)}")

    # -- Web API -----------------------------------------------------------------------

    def access(self, args: Json) -> Json:
        """`oauth.v2.access`: a code's exchange, or a refresh (`grant_type`)."""
        if (args.get("client_id"), args.get("client_secret")) != (CLIENT_ID, CLIENT_SECRET):
            raise Refused("invalid_client_id")
        if args.get("grant_type") == "refresh_token":
            return self._refresh(str(args.get("refresh_token") or ""))
        target = self._codes.pop(str(args.get("code") or ""), None)
        if target is None:
            raise Refused("invalid_code")
        grant = self._grants.get(target)
        if grant is None or grant.revoked:
            grant = self._grants[target] = Grant(target)
        return self._answer(grant)

    def check(self, method: str, token: str) -> None:
        """Refuse a token Slack would: revoked, or expired."""
        grant = self._by_token.get(token)
        if grant is None:
            return  # not one of ours: a single-workspace test's token
        if grant.revoked:
            raise Refused("token_revoked")
        expires = grant.access_tokens.get(token)
        if expires is not None and time.time() >= expires:
            raise Refused("token_expired")

    def auth_test(self, token: str) -> Json | None:
        """`auth.test` for one of the tokens issued here (None: not ours)."""
        grant = self._by_token.get(token)
        if grant is None:
            return None
        target, ws = grant.target, DEFAULT_WORKSPACE
        return {
            "ok": True,
            "url": "https://example-org.enterprise.slack.com/" if target.org_wide else "",
            "team": target.team_name,
            "user": ws.bot_name,
            "team_id": target.team_id,
            "user_id": target.bot_user_id,
            "bot_id": target.bot_id,
            "enterprise_id": target.enterprise_id,
            "is_enterprise_install": target.org_wide,
        }

    def revoke_token(self, token: str) -> Json:
        """`auth.revoke`."""
        grant = self._by_token.get(token)
        if grant is not None:
            grant.revoked = True
        return {"ok": True, "revoked": True}

    def _refresh(self, refresh_token: str) -> Json:
        grant = self._by_refresh.get(refresh_token)
        taken = (
            grant is not None
            and not grant.revoked
            and not self.refuse_refreshes
            and refresh_token not in self._spent_refresh
        )
        self.refreshes.append((refresh_token, taken))
        if grant is None or not taken:
            raise Refused("invalid_refresh_token")
        self._spent_refresh.add(refresh_token)
        del self._by_refresh[refresh_token]
        return self._answer(grant, refreshed=True)

    def _answer(self, grant: Grant, *, refreshed: bool = False) -> Json:
        target, ws, n = grant.target, DEFAULT_WORKSPACE, next(self._serial)
        token = f"xoxb-{target.team_id or target.enterprise_id}-{n}"
        life = self.refreshed_expires_in if refreshed else self.expires_in
        grant.access_tokens[token] = time.time() + life if self.rotation else None
        self._by_token[token] = grant
        answer: Json = {
            "ok": True,
            "access_token": token,
            "token_type": "bot",
            "scope": "app_mentions:read,chat:write",
            "bot_user_id": target.bot_user_id,
            "app_id": ws.app_id,
            "team": None if target.org_wide else {"id": target.team_id, "name": target.team_name},
            "enterprise": (
                {"id": target.enterprise_id, "name": target.enterprise_name}
                if target.enterprise_id
                else None
            ),
            "is_enterprise_install": target.org_wide,
            "authed_user": {"id": "U0TPADMIN01"},
        }
        if self.rotation:
            refresh = f"xoxe-1-{n}"
            grant.refresh_token = refresh
            self._by_refresh[refresh] = grant
            answer |= {"refresh_token": refresh, "expires_in": life}
        return answer
