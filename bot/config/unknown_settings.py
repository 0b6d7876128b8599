"""Names given to the app that are not settings: a misspelt one changes nothing, so say so.

Settings ignore names they do not know, so ``RUN_TOKEN_BUGDET=...`` in ``.env`` would
change nothing and say nothing. :func:`unknown_settings` finds every such name in the
settings file, and the variables of the environment that look like a misspelt setting,
each with the setting it most likely meant (difflib). ``python -m bot`` logs one warning
for each (``settings.unknown_name_ignored``); ``--check`` fails on them.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dotenv import dotenv_values

from bot.config.settings import ENV_FILE, Settings

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "ENVIRONMENT_CUTOFF",
    "READ_BY_OTHERS",
    "READ_BY_THE_TRACING_SDK",
    "UnknownSetting",
    "unknown_settings",
]

READ_BY_OTHERS = frozenset({"POSTGRES_PASSWORD"})
"""Names that belong in ``.env`` without being settings: ``compose.yaml`` reads them."""

READ_BY_THE_TRACING_SDK = "OTEL_"
"""The OpenTelemetry settings (``OTEL_*``): the tracing SDK reads them itself
(agent_core/process/tracing/), so they are never unknown."""

ENVIRONMENT_CUTOFF = 0.85
"""How close (difflib's ratio) a variable of the environment must be to a setting's name,
besides sharing its first word, to be taken for a misspelling of it. The environment is
shared with everything else on the host, so only near misses are reported."""


@dataclass(frozen=True, slots=True)
class UnknownSetting:
    """A name given to threadpilot that is not one of its settings, and so is ignored."""

    name: str
    source: str
    """The settings file it is in, or ``the environment``."""
    nearest: str | None
    """The setting it most likely meant, if one is close."""

    def __str__(self) -> str:
        meant = f"; did you mean {self.nearest}?" if self.nearest else ""
        return f"{self.name} (in {self.source}) is not a setting and is ignored{meant}"


def unknown_settings(
    env_file: str | Path | None = ENV_FILE, environ: Mapping[str, str] | None = None
) -> list[UnknownSetting]:
    """Every name in ``env_file`` that is not a setting, and every variable of ``environ``
    (default: this process's) that looks like a misspelt one: it shares a setting's first
    word (``SLACK_``, ``OPENAI_``, ``MAX_``, ...) and is within :data:`ENVIRONMENT_CUTOFF`.

    The known names are the fields of :class:`Settings`, so a new setting is known here
    as soon as it is declared there."""
    known = sorted(Settings.model_fields)
    found: list[UnknownSetting] = []
    if env_file is not None and Path(env_file).is_file():
        names = [
            n
            for n in dotenv_values(env_file)
            if n not in known
            and n not in READ_BY_OTHERS
            and not n.startswith(READ_BY_THE_TRACING_SDK)
        ]
        found += [UnknownSetting(n, str(env_file), _nearest(n, known, 0.6)) for n in names]
    first_words = tuple({f"{n.split('_', 1)[0]}_" for n in known if "_" in n})
    shared = os.environ if environ is None else environ
    for name in _sorted_new(shared, {*known, *(u.name for u in found)}):
        nearest = _nearest(name, known, ENVIRONMENT_CUTOFF)
        if name.startswith(first_words) and nearest is not None:
            found.append(UnknownSetting(name, "the environment", nearest))
    return found


def _sorted_new(names: Iterable[str], seen: set[str]) -> list[str]:
    return sorted(n for n in names if n not in seen)


def _nearest(name: str, known: list[str], cutoff: float) -> str | None:
    # Setting names are upper case and read case-sensitively: max_turns is a slip too.
    close = difflib.get_close_matches(name.upper(), known, n=1, cutoff=cutoff)
    return close[0] if close else None
