"""Settings (docs/operations.md): a missing or malformed one stops ``python -m bot`` with
exit status 2 and one line that names it; the values that are accepted are normalised.

The refusals run the real command, each in a clean environment and an empty working
directory (so no ``.env`` is read). They start together, so the whole set costs about
one interpreter start-up.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from dotenv import dotenv_values

from agent_core import BUDGET_SETTINGS, ConfigError, EndedBecause, RunLimits
from bot.__main__ import USAGE
from bot.config.settings import DEPRECATED_SETTINGS, Settings, StopPolicy, load_settings
from bot.config.unknown_settings import unknown_settings

if TYPE_CHECKING:
    from collections.abc import Iterator

REPO = Path(__file__).resolve().parents[3]
VALID = {
    "SLACK_BOT_TOKEN": "xoxb-settings-test",
    "SLACK_SIGNING_SECRET": "settings-test-secret",
    "OPENAI_API_KEY": "settings-test-key",
    "OPENAI_MODEL": "settings-test-model",
}
USER_TOKEN = "xoxp-1234-user-token-do-not-echo"


@dataclass(frozen=True)
class Case:
    setting: str
    """The setting the one line must name."""
    env: dict[str, str | None]
    """Changes to VALID; None removes the variable."""


CASES = {
    "missing bot token": Case("SLACK_BOT_TOKEN", {"SLACK_BOT_TOKEN": None}),
    "user token": Case("SLACK_BOT_TOKEN", {"SLACK_BOT_TOKEN": USER_TOKEN}),
    "port not a number": Case("PORT", {"PORT": "eighty"}),
    "bad stop policy": Case("STOP_POLICY", {"STOP_POLICY": "everyone"}),
    "bad history limit": Case("SLACK_HISTORY_LIMIT", {"SLACK_HISTORY_LIMIT": "tier9"}),
}
"""Run as the real command (each costs an interpreter start-up)."""

FIRST_RUNS = {
    "nothing set": Case("SLACK_BOT_TOKEN", dict.fromkeys(VALID)),
    "neither app token nor signing secret": Case("SLACK_APP_TOKEN", {"SLACK_SIGNING_SECRET": None}),
}
"""Run as the real command too: several settings missing, each named on its own line."""

MORE_CASES = {
    "empty bot token": Case("SLACK_BOT_TOKEN", {"SLACK_BOT_TOKEN": ""}),
    "port out of range": Case("PORT", {"PORT": "70000"}),
    "app token that is not xapp": Case("SLACK_APP_TOKEN", {"SLACK_APP_TOKEN": "xoxb-not-app"}),
    "api url not http": Case("SLACK_API_URL", {"SLACK_API_URL": "slack.com/api"}),
    "unknown database": Case("DATABASE_URL", {"DATABASE_URL": "mysql://localhost/tp"}),
    "sqlite with two slashes": Case("DATABASE_URL", {"DATABASE_URL": "sqlite://./tp.db"}),
    "in-memory sqlite": Case("DATABASE_URL", {"DATABASE_URL": "sqlite:///:memory:"}),
    "log level": Case("LOG_LEVEL", {"LOG_LEVEL": "LOUD"}),
    "no database connections": Case("DATABASE_POOL_SIZE", {"DATABASE_POOL_SIZE": "0"}),
    "metrics on the public port": Case("METRICS_PORT", {"METRICS_PORT": "3000"}),
    "unknown model api": Case("MODEL_API", {"MODEL_API": "gemini"}),
    "openai model missing": Case("OPENAI_MODEL", {"OPENAI_MODEL": None}),
    "anthropic key missing": Case(
        "ANTHROPIC_API_KEY", {"MODEL_API": "anthropic", "ANTHROPIC_MODEL": "claude-x"}
    ),
    "anthropic key a placeholder": Case(
        "ANTHROPIC_API_KEY",
        {"MODEL_API": "anthropic", "ANTHROPIC_API_KEY": "sk-ant-...", "ANTHROPIC_MODEL": "c"},
    ),
    "anthropic url not http": Case(
        "ANTHROPIC_BASE_URL", {"ANTHROPIC_BASE_URL": "api.anthropic.com"}
    ),
    "no reply time": Case("MODEL_REPLY_TIMEOUT", {"MODEL_REPLY_TIMEOUT": "0"}),
    "allow guests not a boolean": Case("ALLOW_GUESTS", {"ALLOW_GUESTS": "sometimes"}),
    "cost budget without prices": Case("RUN_COST_BUDGET", {"RUN_COST_BUDGET": "5"}),
    "time budget not a duration": Case("RUN_TIME_BUDGET", {"RUN_TIME_BUDGET": "a while"}),
    "negative runs per user": Case("MAX_RUNS_PER_USER", {"MAX_RUNS_PER_USER": "-1"}),
    "runs per user not a number": Case("MAX_RUNS_PER_USER", {"MAX_RUNS_PER_USER": "three"}),
    "both modes": Case(
        "SLACK_BOT_TOKEN", {"SLACK_CLIENT_ID": "1.2", "SLACK_CLIENT_SECRET": "client-secret"}
    ),
    "oauth without its secret": Case(
        "SLACK_CLIENT_SECRET", {"SLACK_BOT_TOKEN": None, "SLACK_CLIENT_ID": "1.2"}
    ),
    "token key not a fernet key": Case(
        "SLACK_TOKEN_KEY", {"SLACK_TOKEN_KEY": "not-a-key-do-not-echo"}
    ),
    "redirect uri not a url": Case(
        "SLACK_REDIRECT_URI",
        {
            "SLACK_BOT_TOKEN": None,
            "SLACK_CLIENT_ID": "1.2",
            "SLACK_CLIENT_SECRET": "client-secret",
            "SLACK_REDIRECT_URI": "example.com/slack/oauth_redirect",
        },
    ),
}
"""Checked in-process through load_settings(), whose error is the line main() prints."""


@dataclass(frozen=True)
class Exit:
    status: int
    stdout: str
    stderr: str
    cwd: Path


@pytest.fixture(scope="module")
def exits(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Exit]]:
    """Run ``python -m bot`` once per case, all at once."""
    processes: dict[str, subprocess.Popen[str]] = {}
    cwds: dict[str, Path] = {}
    for name, case in (CASES | FIRST_RUNS).items():
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), **VALID}
        for key, value in case.env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        cwds[name] = tmp_path_factory.mktemp("cwd")
        processes[name] = subprocess.Popen(
            [sys.executable, "-m", "bot"],
            cwd=cwds[name],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        results = {}
        for name, process in processes.items():
            stdout, stderr = process.communicate(timeout=30)
            results[name] = Exit(process.returncode, stdout, stderr, cwds[name])
        yield results
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.communicate()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_setting_stops_start_up_with_one_line_naming_it(
    exits: dict[str, Exit], name: str
) -> None:
    result = exits[name]
    setting = CASES[name].setting

    assert result.status == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"threadpilot: {setting}: "), lines[0]
    assert result.stdout == ""
    assert USER_TOKEN not in result.stderr  # a rejected secret is not echoed


@pytest.mark.slow
def test_a_missing_setting_says_where_settings_come_from(exits: dict[str, Exit]) -> None:
    result = exits["missing bot token"]

    assert result.stderr == (
        "threadpilot: SLACK_BOT_TOKEN: missing: set it in the environment or in "
        f"{result.cwd}/.env, which does not exist (cp .env.example .env, then fill it in)\n"
    )


@pytest.mark.slow
def test_a_first_run_without_dotenv_names_every_missing_setting_at_once(
    exits: dict[str, Exit],
) -> None:
    """A newcomer's first ``python -m bot``: no ``.env``, nothing exported. Every setting
    they must set is named in that one try, the app token that the shipped manifest's
    Socket Mode needs included, and the signing secret that HTTP mode would need instead."""
    result = exits["nothing set"]
    where = f"set it in the environment or in {result.cwd}/.env, which does not exist"

    assert result.status == 2
    assert [line.split(": ", 2)[1] for line in result.stderr.splitlines()] == [
        "SLACK_BOT_TOKEN",
        "SLACK_APP_TOKEN",
        "SLACK_SIGNING_SECRET",
        "OPENAI_API_KEY",
        "OPENAI_MODEL",
    ]
    assert all(where in line for line in result.stderr.splitlines()), result.stderr
    assert "the shipped manifest.yml turns Socket Mode on" in result.stderr


@pytest.mark.slow
def test_without_app_token_or_signing_secret_both_are_named(exits: dict[str, Exit]) -> None:
    result = exits["neither app token nor signing secret"]

    assert result.status == 2
    assert [line.split(": ", 2)[1] for line in result.stderr.splitlines()] == [
        "SLACK_APP_TOKEN",
        "SLACK_SIGNING_SECRET",
    ]
    assert "missing (HTTP mode needs it instead of SLACK_APP_TOKEN)" in result.stderr


@pytest.mark.slow
def test_a_misspelt_name_in_dotenv_is_named_beside_the_setting_it_left_missing(
    tmp_path: Path,
) -> None:
    (tmp_path / ".env").write_text("OPENAI_MODLE=gpt-4o-mini\n")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), **VALID}
    del env["OPENAI_MODEL"]

    ran = subprocess.run(
        [sys.executable, "-m", "bot"], cwd=tmp_path, env=env, capture_output=True, text=True
    )

    assert ran.returncode == 2
    assert ran.stderr.splitlines() == [
        "threadpilot: OPENAI_MODLE (in .env) is not a setting and is ignored; "
        "did you mean OPENAI_MODEL?",
        "threadpilot: OPENAI_MODEL: missing (required with MODEL_API=openai-chat): set it in "
        f"{tmp_path}/.env or in the environment (.env.example explains it)",
    ]


# -- names that are not settings -----------------------------------------------------------


def test_every_name_in_dotenv_that_is_not_a_setting_is_reported(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    # compose.yaml reads POSTGRES_PASSWORD from the same file: that one belongs there.
    dotenv.write_text(
        "MAX_TURNS=4\nMAX_TRUNS=3\nPOSTGRES_PASSWORD=pw\nFAVOURITE_COLOUR=blue\nport=8080\n"
    )

    found = unknown_settings(dotenv, environ={})

    assert [(u.name, u.nearest) for u in found] == [
        ("MAX_TRUNS", "MAX_TURNS"),
        ("FAVOURITE_COLOUR", None),
        ("port", "PORT"),  # names are read case-sensitively
    ]
    assert str(found[0]) == (
        f"MAX_TRUNS (in {dotenv}) is not a setting and is ignored; did you mean MAX_TURNS?"
    )


def test_the_known_names_are_the_settings_model_fields(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text("".join(f"{name}=\n" for name in Settings.model_fields))

    assert unknown_settings(dotenv, environ=dict.fromkeys(Settings.model_fields, "x")) == []


def test_only_near_misses_of_a_setting_in_the_environment_are_reported() -> None:
    environ = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "USER": "root",
        "SLACK_BOT_TOKN": "xoxb-1",  # a slip
        "TOOL_TIMEOUTS": "30",  # a slip
        "SLACK_WEBHOOK_URL": "https://hooks.example",  # another tool's
        "OPENAI_ORG_ID": "org-1",  # the OpenAI SDK's own
        "DATABASE_HOST": "db",  # another tool's
        "THREADPILOT_TEST_POSTGRES": "postgresql://...",
    }

    found = unknown_settings(None, environ=environ)

    assert [(u.name, u.source, u.nearest) for u in found] == [
        ("SLACK_BOT_TOKN", "the environment", "SLACK_BOT_TOKEN"),
        ("TOOL_TIMEOUTS", "the environment", "TOOL_TIMEOUT"),
    ]


# -- what is accepted ----------------------------------------------------------------------


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """A clean environment with the required settings, outside any ``.env``."""
    monkeypatch.chdir(tmp_path)
    for name in Settings.model_fields:
        monkeypatch.delenv(name, raising=False)
    for name, value in VALID.items():
        monkeypatch.setenv(name, value)
    return monkeypatch


def test_admin_user_ids_are_a_comma_separated_list(environment: pytest.MonkeyPatch) -> None:
    environment.setenv("ADMIN_USER_IDS", "U1, U2,,  W3 ")

    assert load_settings().ADMIN_USER_IDS == frozenset({"U1", "U2", "W3"})


def test_slack_api_url_gets_its_trailing_slash(environment: pytest.MonkeyPatch) -> None:
    environment.setenv("SLACK_API_URL", "https://slack-gov.com/api")

    assert load_settings().SLACK_API_URL == "https://slack-gov.com/api/"


def test_defaults(environment: pytest.MonkeyPatch) -> None:
    settings = load_settings()

    assert settings.SLACK_API_URL == "https://slack.com/api/"
    assert settings.PORT == 3000
    assert settings.STOP_POLICY is StopPolicy.REQUESTER
    assert settings.ADMIN_USER_IDS == frozenset()
    assert not settings.ALLOW_EXTERNAL_USERS and not settings.ALLOW_GUESTS
    assert not settings.socket_mode
    assert settings.MAX_RUNS_PER_USER == 3
    assert (
        settings.run_limits == RunLimits()
    )  # the budgets' defaults (agent_core/values/budget_settings.py)


def test_budgets_read_from_text_or_numbers(environment: pytest.MonkeyPatch) -> None:
    environment.setenv("RUN_TIME_BUDGET", "10m")
    environment.setenv("MODEL_CONTEXT_WINDOW", "128000")
    settings = load_settings(RUN_TOOL_CALL_BUDGET=0, MAX_CHILDREN_PER_RUN=3)

    limits = settings.run_limits
    assert limits.budget.time_s == 600 and limits.budget.tool_calls is None  # 0: off
    assert (limits.max_children_per_run, limits.context_window) == (3, 128_000)


def test_an_empty_budget_turns_it_off(environment: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # SPEC: "0 or empty turns one off", set empty in the environment or in .env; every
    # other setting left empty still means its default.
    environment.setenv("RUN_TOKEN_BUDGET", "")
    environment.setenv("RUN_TOOL_CALL_BUDGET", "5")  # the environment wins over .env
    environment.setenv("MAX_TOOL_CALLS_PER_STEP", "")
    (tmp_path / ".env").write_text(
        "RUN_TIME_BUDGET=\nRUN_TOOL_CALL_BUDGET=\nRUN_COST_BUDGET=\nMODEL_PRICE_INPUT=\n"
    )

    limits = load_settings().run_limits

    assert limits.budget.tokens is None and limits.budget.time_s is None
    assert limits.budget.tool_calls == 5
    assert limits.budget.cost_usd is None and limits.budget.prices is None
    assert limits.max_tool_calls_per_step == 16


def test_env_example_as_shipped_keeps_the_default_budgets(
    environment: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Its budget lines copied to .env as they are (the rest are placeholders to fill in).
    lines = (REPO / ".env.example").read_text("utf-8").splitlines()
    budgets = [line for line in lines if line.split("=", 1)[0] in BUDGET_SETTINGS]
    assert len(budgets) == len(BUDGET_SETTINGS)
    (tmp_path / ".env").write_text("\n".join(budgets) + "\n", "utf-8")

    assert load_settings().run_limits == RunLimits()


def test_an_app_token_turns_socket_mode_on_and_the_secret_becomes_optional(
    environment: pytest.MonkeyPatch,
) -> None:
    environment.delenv("SLACK_SIGNING_SECRET")
    environment.setenv("SLACK_APP_TOKEN", "xapp-1-test")

    settings = load_settings()

    assert settings.socket_mode
    assert settings.SLACK_SIGNING_SECRET is None


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///./threadpilot.db",
        "sqlite:////var/lib/threadpilot/threadpilot.db",
        "postgresql://tp:secret@db.internal:5432/threadpilot",
        "postgres://tp@db.internal/threadpilot?sslmode=require",
        "postgresql+asyncpg://tp:secret@db.internal:5432/threadpilot",
    ],
)
def test_every_documented_database_url_is_accepted(
    environment: pytest.MonkeyPatch, url: str
) -> None:
    environment.setenv("DATABASE_URL", url)

    assert load_settings().DATABASE_URL == url


def test_a_refused_database_url_does_not_echo_its_password(
    environment: pytest.MonkeyPatch,
) -> None:
    environment.setenv("DATABASE_URL", "mysql://tp:hunter2@db.internal/threadpilot")

    with pytest.raises(ConfigError) as raised:
        load_settings()

    assert raised.value.setting == "DATABASE_URL"
    assert "hunter2" not in str(raised.value)


def test_empty_values_mean_the_default(environment: pytest.MonkeyPatch) -> None:
    # As in a .env copied from .env.example, where optional settings are left empty.
    for name in ("SLACK_APP_TOKEN", "SLACK_API_URL", "PORT", "ADMIN_USER_IDS", "STOP_POLICY"):
        environment.setenv(name, "")
    environment.setenv("MAX_RUNS_PER_USER", "")  # the default, as the budgets' (0: off)

    settings = load_settings()

    assert settings.MAX_RUNS_PER_USER == 3
    assert settings.SLACK_API_URL == "https://slack.com/api/"
    assert settings.PORT == 3000
    assert not settings.socket_mode


def test_a_dotenv_file_in_the_working_directory_is_read(
    environment: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    environment.delenv("OPENAI_MODEL")
    (tmp_path / ".env").write_text("OPENAI_MODEL=from-dotenv\nPORT=8080\n")
    environment.setenv("PORT", "9090")  # the environment wins over the file

    settings = load_settings()

    assert settings.OPENAI_MODEL == "from-dotenv"
    assert settings.PORT == 9090


def test_an_empty_variable_of_the_environment_hides_the_dotenv_line(
    environment: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """docs/operations.md: the environment wins, and empty means the default, so
    ``PORT=`` exported over ``PORT=8080`` in ``.env`` is port 3000; an empty budget is off."""
    (tmp_path / ".env").write_text(
        "PORT=8080\nMAX_TURNS=5\nRUN_TOKEN_BUDGET=500\nOPENAI_BASE_URL=http://127.0.0.1:9/v1\n"
    )
    for name in ("PORT", "MAX_TURNS", "RUN_TOKEN_BUDGET", "OPENAI_BASE_URL"):
        environment.setenv(name, "")

    settings = load_settings()

    assert settings.PORT == 3000
    assert settings.MAX_TURNS == 20
    assert settings.run_limits.budget.tokens is None
    assert settings.OPENAI_BASE_URL is None


def test_an_empty_variable_of_the_environment_leaves_a_required_setting_missing(
    environment: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / ".env").write_text("OPENAI_MODEL=from-dotenv\n")
    environment.setenv("OPENAI_MODEL", "")

    with pytest.raises(ConfigError) as raised:
        load_settings()

    assert raised.value.setting == "OPENAI_MODEL"
    assert raised.value.problem.startswith("missing")


@pytest.mark.parametrize("name", list(CASES | MORE_CASES))
def test_load_settings_names_the_bad_setting(environment: pytest.MonkeyPatch, name: str) -> None:
    case = (CASES | MORE_CASES)[name]
    for key, value in case.env.items():
        if value is None:
            environment.delenv(key, raising=False)
        else:
            environment.setenv(key, value)

    with pytest.raises(ConfigError) as raised:
        load_settings()

    assert raised.value.setting == case.setting
    assert str(raised.value).startswith(f"{case.setting}: ")
    assert "\n" not in str(raised.value)


def test_each_model_api_takes_its_own_key_model_and_url(environment: pytest.MonkeyPatch) -> None:
    """With MODEL_API=anthropic the OpenAI settings may be unset, and the other way round;
    the endpoint is the chosen API's."""
    for name in ("OPENAI_API_KEY", "OPENAI_MODEL"):
        environment.delenv(name, raising=False)
    environment.setenv("MODEL_API", "anthropic")
    environment.setenv("ANTHROPIC_API_KEY", "anthropic-test-key")
    environment.setenv("ANTHROPIC_MODEL", "claude-test")
    environment.setenv("ANTHROPIC_BASE_URL", "https://llm-gateway.example/anthropic")
    endpoint = load_settings().model_endpoint
    assert (endpoint.api.value, endpoint.api_key, endpoint.model, endpoint.base_url) == (
        "anthropic",
        "anthropic-test-key",
        "claude-test",
        "https://llm-gateway.example/anthropic",
    )

    environment.setenv("MODEL_API", "openai-responses")
    environment.setenv("OPENAI_API_KEY", "openai-test-key")
    environment.setenv("OPENAI_MODEL", "gpt-test")
    settings = load_settings()
    assert settings.model_endpoint.api_key == "openai-test-key"
    assert settings.model_endpoint.base_url is None  # the API's own default
    assert settings.MODEL_REPLY_TIMEOUT == 600.0


# -- what the docs say about settings agrees with the code ----------------------------------


def test_a_deprecated_setting_is_still_read_and_named_for_its_warning(
    environment: pytest.MonkeyPatch,
) -> None:
    assert load_settings().deprecated == {}

    environment.setenv("AUTO_RESUME_ON_RESTART", "false")
    settings = load_settings()

    assert list(settings.deprecated) == ["AUTO_RESUME_ON_RESTART"]
    assert "AUTO_RESUME" in settings.deprecated["AUTO_RESUME_ON_RESTART"]
    assert EndedBecause.WORKER_LOST not in settings.resume_settings.auto_resume


def test_no_deprecated_setting_is_offered_or_relied_on() -> None:
    """``.env.example`` does not set one, and the README's several-workers section does
    not lean on one (a crashed worker's runs resume as AUTO_RESUME says)."""
    example = dotenv_values(REPO / ".env.example")
    readme = (REPO / "README.md").read_text()
    workers = readme.split("## Several workers", 1)[1].split("\n## ", 1)[0]

    assert set(DEPRECATED_SETTINGS).isdisjoint(example)
    assert not [name for name in DEPRECATED_SETTINGS if name in workers]
    assert "`AUTO_RESUME`" in workers


def test_the_readme_and_help_say_health_checks_stay_on_port() -> None:
    """What the app does (test_metrics.py): with METRICS_PORT, /metrics leaves PORT, and
    /healthz and /readyz answer on both; docs/admin.md says so, and so must these."""
    readme = " ".join((REPO / "README.md").read_text().split())
    usage = " ".join(USAGE.split())

    assert "`PORT` keeps serving those two" in readme
    assert "(PORT keeps those two)" in usage
    assert "Without `METRICS_PORT` everything stays on `PORT`" in " ".join(
        (REPO / "docs" / "admin.md").read_text().split()
    )


def test_oauth_mode_needs_no_bot_token_and_ignores_the_example_placeholder(
    environment: pytest.MonkeyPatch,
) -> None:
    environment.setenv("SLACK_BOT_TOKEN", "xoxb-")  # as .env.example ships it
    environment.setenv("SLACK_CLIENT_ID", "1.2")
    environment.setenv("SLACK_CLIENT_SECRET", "client-secret")

    settings = load_settings()

    assert settings.oauth_mode
    assert settings.SLACK_BOT_TOKEN is None
