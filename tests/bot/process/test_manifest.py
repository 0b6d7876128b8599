"""``manifest.yml`` asks for exactly what the app uses (docs/slack-setup.md), within the
limits Slack puts on an agent's manifest (``agent_view``: a description of at most 300
characters, at most four suggested prompts). It, ``.env.example`` and the README agree on
the transport: the shipped manifest turns Socket Mode on, so the app-level token is asked
for.

Read line by line (the manifest is plain YAML lists and keys; the app has no YAML
dependency of its own).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent_core import ConfigError
from bot.config.settings import Settings, load_settings
from bot.handlers.command import COMMAND
from bot.installs.oauth import BOT_SCOPES

MANIFEST = Path(__file__).resolve().parents[3] / "manifest.yml"


def section(name: str) -> list[str]:
    """The lines of the block under ``name:`` (by indentation), comments stripped."""
    lines = MANIFEST.read_text("utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.split(" #", 1)[0].strip() == f"{name}:")
    indent = len(lines[start]) - len(lines[start].lstrip())
    found = []
    for line in lines[start + 1 :]:
        text = line.split(" #", 1)[0].rstrip()
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        if len(text) - len(text.lstrip()) <= indent:
            break
        found.append(text)
    return found


def items(name: str) -> list[str]:
    return [line.strip()[2:] for line in section(name) if line.strip().startswith("- ")]


def value(lines: list[str], key: str) -> str:
    for line in lines:
        match = re.fullmatch(rf"\s*(?:- )?{key}: (.*)", line)
        if match:
            return match.group(1)
    raise KeyError(key)


def test_the_events_are_those_the_app_listens_to() -> None:
    assert items("bot_events") == [
        "app_mention",  # a mention starts a run (bot/handlers/mentions.py)
        "message.channels",  # replies in a run's thread: guidance, stop words, follow-ups
        "message.groups",
        "message.im",  # DMs start runs
        "message.mpim",  # group DMs, like DMs
        "app_home_opened",  # the dashboard (bot/handlers/home.py)
        "agent_session_stopped",  # Slack's native stop (bot/handlers/events.py)
        "app_uninstalled",  # a workspace let the app go (bot/handlers/uninstall.py)
        "tokens_revoked",
    ]


def test_the_scopes_are_those_the_app_uses() -> None:
    assert items("bot") == [
        "app_mentions:read",
        "chat:write",
        "channels:history",
        "groups:history",
        "im:history",
        "mpim:history",
        "commands",
        "reactions:write",
        "assistant:write",
        "users:read",  # users.info: who is a guest or from another organisation
        "channels:read",  # conversations.info: which requests App Home may show others
    ]


def test_home_tab_slash_command_and_agent_view() -> None:
    app_home = section("app_home")
    assert value(app_home, "home_tab_enabled") == "true"
    assert value(app_home, "messages_tab_enabled") == "true"
    commands = section("slash_commands")
    assert value(commands, "command") == COMMAND
    assert value(commands, "should_escape") == "false"
    agent = section("agent_view")
    assert len(value(agent, "agent_description")) <= 300
    prompts = [line for line in agent if line.strip().startswith("- title:")]
    assert 1 <= len(prompts) <= 4
    assert value(section("interactivity"), "is_enabled") == "true"


# -- the manifest, .env.example and the README agree on the transport ----------------------

ROOT = MANIFEST.parent
REQUIRED_AS_WRITTEN = {
    "SLACK_BOT_TOKEN": "xoxb-1-agree-test",
    "SLACK_APP_TOKEN": "xapp-1-agree-test",
    "SLACK_SIGNING_SECRET": "agree-test-secret",
    "OPENAI_API_KEY": "agree-test-key",
    "OPENAI_MODEL": "agree-test-model",
}
"""What an admin pastes for each setting the app says is missing or a placeholder."""


def test_the_shipped_manifest_turns_socket_mode_on() -> None:
    assert value(section("settings"), "socket_mode_enabled") == "true"


def test_an_env_example_filled_in_as_asked_runs_in_socket_mode(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``cp .env.example .env``, then fill in what start-up names, until it starts: the
    settings an admin ends up with are those the shipped manifest needs."""
    for name in Settings.model_fields:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    dotenv = tmp_path / ".env"
    dotenv.write_text((ROOT / ".env.example").read_text())
    asked: list[str] = []
    for _ in range(3):
        try:
            settings = load_settings()
            break
        except ConfigError as exc:
            named = [line.partition(":")[0] for line in str(exc).splitlines()]
        asked += named
        lines = dotenv.read_text().splitlines()
        kept = [line for line in lines if line.partition("=")[0] not in named]
        dotenv.write_text("\n".join([*kept, *(f"{n}={REQUIRED_AS_WRITTEN[n]}" for n in named)]))
    else:
        pytest.fail(f"still refused after filling in {asked}")

    assert settings.socket_mode
    assert "SLACK_APP_TOKEN" in asked  # the example asks for it, as the manifest needs
    assert "SLACK_SIGNING_SECRET" not in asked


def test_the_readme_says_the_shipped_manifest_needs_the_app_level_token() -> None:
    readme = (ROOT / "README.md").read_text()
    paragraphs = [" ".join(p.split()) for p in readme.split("\n\n")]
    about_it = [p for p in paragraphs if "xapp-" in p or "SLACK_APP_TOKEN" in p]

    assert about_it
    assert not [p for p in about_it if "optional" in p.lower()]
    assert any("manifest" in p and "needs" in p and "SLACK_APP_TOKEN" in p for p in about_it)


def test_an_oauth_install_asks_for_the_manifests_scopes() -> None:
    assert list(BOT_SCOPES) == items("bot")
