"""Installations' tokens at rest: sealed with ``SLACK_TOKEN_KEY`` (Fernet), or in clear.

``SLACK_TOKEN_KEY`` is one or more Fernet keys, comma-separated, newest first: the first
seals, any of them opens (cryptography's ``MultiFernet``), so a key is rotated by putting
the new one in front, letting the workers re-seal, then dropping the old one
(docs/admin.md).

A stored secret says how it was stored: ``fernet:`` + the token, or ``clear:`` + the
JSON. One written in clear is still read once a key is set (an upgrade in place). Each
worker re-seals, once after it starts, every installation in clear or sealed with an older
key (:meth:`bot.installs.store.InstallationStore.reseal_all`).
"""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from bot.errors import BotError

__all__ = ["CLEAR", "SEALED", "Sealer", "SecretUnreadable", "check_keys"]

SEALED = "fernet:"
CLEAR = "clear:"


class SecretUnreadable(BotError):
    """A stored installation that none of ``SLACK_TOKEN_KEY``'s keys opens (or sealed,
    with no key set)."""


def check_keys(value: str) -> list[Fernet]:
    """The Fernet keys of ``SLACK_TOKEN_KEY``; raises ValueError (one line, no key
    material) if one is not a Fernet key."""
    keys = [part.strip() for part in value.split(",") if part.strip()]
    if not keys:
        raise ValueError("names no key: leave it unset, or set a Fernet key")
    fernets = []
    for i, key in enumerate(keys, 1):
        try:
            fernets.append(Fernet(key.encode()))
        except (ValueError, TypeError):
            raise ValueError(
                f"key {i} is not a Fernet key (32 url-safe base64-encoded bytes); make one "
                'with: python -c "from cryptography.fernet import Fernet; '
                'print(Fernet.generate_key().decode())"'
            ) from None
    return fernets


class Sealer:
    """Seals and opens the stored form of an installation."""

    def __init__(self, keys: str | None) -> None:
        fernets = check_keys(keys) if keys else []
        self._fernet = MultiFernet(fernets) if fernets else None
        self._newest = fernets[0] if fernets else None

    @property
    def sealing(self) -> bool:
        """False when tokens are stored in clear (no ``SLACK_TOKEN_KEY``)."""
        return self._fernet is not None

    def seal(self, text: str) -> str:
        if self._fernet is None:
            return CLEAR + text
        return SEALED + self._fernet.encrypt(text.encode()).decode()

    def stale(self, stored: str) -> bool:
        """True if ``stored`` should be sealed again: it is in clear while a key is set,
        or sealed with a key other than the newest."""
        if self._newest is None:
            return False
        if stored.startswith(CLEAR):
            return True
        try:
            self._newest.decrypt(stored.removeprefix(SEALED).encode())
        except InvalidToken:
            return True
        return False

    def open(self, stored: str) -> str:
        if stored.startswith(CLEAR):
            return stored.removeprefix(CLEAR)
        if not stored.startswith(SEALED):
            raise SecretUnreadable("an installation is stored in a form this version cannot read")
        if self._fernet is None:
            raise SecretUnreadable(
                "an installation is sealed but SLACK_TOKEN_KEY is not set: set the key it "
                "was sealed with"
            )
        try:
            return self._fernet.decrypt(stored.removeprefix(SEALED).encode()).decode()
        except InvalidToken:
            raise SecretUnreadable(
                "an installation is sealed with a key SLACK_TOKEN_KEY does not hold: put "
                "the old key after the new one"
            ) from None
