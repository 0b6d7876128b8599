"""Where settings come from, read the same way by the app and the terminal runner.

Settings come from the environment and from ``.env`` in the working directory
(:data:`ENV_FILE`). A variable of the environment wins over the file's line, even when
it is empty, and an empty value means the setting's default (docs/operations.md), but
for the budgets (:data:`~agent_core.values.budget_settings.OFF_WHEN_EMPTY`), which it turns
off. :func:`settings_text` is that rule; :func:`missing` is what a missing setting's line
says, and :class:`SettingsInvalid` carries every bad setting at once, one line each.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from dotenv import dotenv_values

from agent_core.values.budget_settings import OFF_WHEN_EMPTY
from agent_core.values.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "ENV_FILE",
    "REQUIRED_WITH_API",
    "EnvFile",
    "SettingsInvalid",
    "missing",
    "raise_all",
    "settings_text",
]

ENV_FILE = ".env"
"""The settings file, in the working directory; the environment wins over it."""

EnvFile = str | Path | None
"""A settings file, or None for none."""

REQUIRED_WITH_API = "required with MODEL_API={api}"
"""Why the key and the model of the chosen API are required (a missing line's bracket)."""


def settings_text(
    env_file: EnvFile | Sequence[str | Path] = ENV_FILE,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Every name given in ``env_file`` (several files: the later wins) or in ``environ``
    (default: this process's), the environment winning, with its text. A name whose
    value is empty is left out (its default applies), unless it is a budget's, which is
    kept as ``""`` (off)."""
    values: dict[str, str | None] = {}
    for path in _files(env_file):
        values.update(dotenv_values(path, encoding="utf-8"))
    values.update(os.environ if environ is None else environ)
    text: dict[str, str] = {}
    for name, value in values.items():
        if value is not None and value.strip():
            text[name] = value
        elif value is not None and name in OFF_WHEN_EMPTY:
            text[name] = ""
    return text


def _files(env_file: EnvFile | Sequence[str | Path]) -> list[Path]:
    if env_file is None:
        return []
    given = [env_file] if isinstance(env_file, str | Path) else list(env_file)
    return [p for p in (Path(f).expanduser() for f in given) if p.is_file()]


def missing(env_file: object = ENV_FILE, why: str = "") -> str:
    """What a missing setting's line says after its name: where settings come from, and
    how to start; ``why`` (in brackets after "missing") says when it is required."""
    said = f"missing ({why})" if why else "missing"
    if env_file is None:
        return f"{said}: set it in the environment"
    if not isinstance(env_file, str | Path):  # several files: pydantic-settings allows it
        return f"{said}: set it in the environment or in a settings file"
    path = Path(env_file).absolute()
    if path.is_file():
        return f"{said}: set it in {path} or in the environment (.env.example explains it)"
    return (
        f"{said}: set it in the environment or in {path}, which does not exist "
        "(cp .env.example .env, then fill it in)"
    )


class SettingsInvalid(ConfigError):
    """Several settings are wrong: ``str()`` is one line per setting, all of them."""

    def __init__(self, problems: Sequence[ConfigError]) -> None:
        super().__init__(problems[0].setting, problems[0].problem)
        self.problems = list(problems)
        self.args = ("\n".join(str(p) for p in problems),)

    def __str__(self) -> str:
        return str(self.args[0])


def raise_all(problems: Sequence[ConfigError]) -> None:
    """Raise the one problem, or :class:`SettingsInvalid` with all of them; nothing when
    there is none."""
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise SettingsInvalid(problems)
