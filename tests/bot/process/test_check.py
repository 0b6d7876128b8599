"""``python -m bot --check`` and ``--help`` as an admin runs them: a real process, the local
fake Slack, llmock, a real SQLite file, and MCP servers from ``MCP_CONFIG``.

One line per check; exit 0 when all pass, 2 otherwise; nothing written (the SQLite file
is not created); every bad setting reported at once, placeholders included.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.bot.harness import SECRET

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.fakes.slack_api import FakeSlack

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
CHECK_S = 60.0
CHECK_LINE = re.compile(r"(ok  |warn|FAIL) [^:]+: \S")


@dataclass(frozen=True)
class Ran:
    status: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()

    def line(self, name: str) -> str:
        (found,) = [line for line in self.lines if line[5:].startswith(f"{name}:")]
        return found


async def run_bot(cwd: Path, *args: str, **settings: str) -> Ran:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), **settings}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    async with asyncio.timeout(CHECK_S):
        out, err = await process.communicate()
    assert process.returncode is not None
    return Ran(process.returncode, out.decode(), err.decode())


def good_settings(slack: FakeSlack, model_url: str, cwd: Path) -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": "xoxb-check-test",
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": slack.api_url,
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": model_url,
        "OPENAI_MODEL": "test-model",
        "DATABASE_URL": f"sqlite:///{cwd}/threadpilot.db",
    }


async def test_a_ready_installation_passes_every_check_and_writes_nothing(
    slack: FakeSlack, llm: LLMock, tmp_path: Path
) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "time": {"command": sys.executable, "args": ["-m", "mcp_server_time"]},
                    "broken": {"command": str(tmp_path / "no-such-server")},
                }
            }
        )
    )
    ran = await run_bot(
        tmp_path,
        "--check",
        **good_settings(slack, llm.base_url(), tmp_path),
        MCP_CONFIG=str(config),
    )

    assert "Traceback" not in ran.stdout + ran.stderr
    # Only the check lines, nothing logged between them (nor on stderr).
    assert all(CHECK_LINE.match(line) for line in ran.lines), ran.stdout
    assert ran.stderr == ""
    assert ran.line("settings").startswith("ok")
    assert ran.line("database").startswith("ok")
    assert "does not exist yet" in ran.line("database")
    assert ran.line("Slack bot token").startswith("ok")
    assert ran.line("model endpoint").startswith("ok")
    assert ran.line("MCP server time").startswith("ok")
    assert "time__get_current_time" in ran.line("MCP server time")
    assert ran.line("MCP server broken").startswith("FAIL")
    assert ran.status == 2  # one server failed
    assert not (tmp_path / "threadpilot.db").exists()  # --check writes nothing
    assert slack.calls("chat.postMessage") == []


async def test_every_bad_setting_is_reported_at_once_placeholders_included(tmp_path: Path) -> None:
    ran = await run_bot(
        tmp_path,
        SLACK_BOT_TOKEN="xoxb-",
        SLACK_SIGNING_SECRET=SECRET,
        OPENAI_API_KEY="sk-...",
        PORT="not-a-port",
    )

    assert ran.status == 2
    named = sorted(line.split(":")[1].strip() for line in ran.stderr.splitlines())
    assert named == ["OPENAI_API_KEY", "OPENAI_MODEL", "PORT", "SLACK_BOT_TOKEN"]
    assert all(line.startswith("threadpilot: ") for line in ran.stderr.splitlines())
    assert "placeholder" in ran.stderr


async def test_refused_tokens_and_an_unreachable_model_fail_their_checks(
    slack: FakeSlack, tmp_path: Path
) -> None:
    slack.fail_next("auth.test", error="token_revoked")
    settings = {
        **good_settings(slack, "http://127.0.0.1:9/v1", tmp_path),
        "SLACK_APP_TOKEN": "xapp-check-test",
    }
    slack.fail_next("apps.connections.open", error="invalid_auth")
    ran = await run_bot(tmp_path, "--check", **settings)

    assert ran.status == 2
    assert ran.line("Slack bot token").startswith("FAIL")
    assert "token_revoked" in ran.line("Slack bot token")
    assert ran.line("Slack app token").startswith("FAIL")
    assert ran.line("model endpoint").startswith("FAIL")
    assert "Traceback" not in ran.stdout + ran.stderr


async def test_a_name_that_is_not_a_setting_fails_the_settings_check(
    slack: FakeSlack, llm: LLMock, tmp_path: Path
) -> None:
    (tmp_path / ".env").write_text("GUIDANCE_MAX_CHRS=2000\n")

    ran = await run_bot(tmp_path, "--check", **good_settings(slack, llm.base_url(), tmp_path))

    assert ran.status == 2
    assert ran.lines[:2] == [
        "ok   settings: read (HTTP on port 3000, MAX_LIVE_RUNS=200)",
        "FAIL settings: GUIDANCE_MAX_CHRS (in .env) is not a setting and is ignored; "
        "did you mean GUIDANCE_MAX_CHARS?",
    ]


@pytest.mark.parametrize("api", ["openai-chat", "openai-responses", "anthropic"])
async def test_the_model_check_names_the_api_it_checked(
    slack: FakeSlack, llm: LLMock, tmp_path: Path, api: str
) -> None:
    settings = {**good_settings(slack, llm.base_url(), tmp_path), "MODEL_API": api}
    model = "test-model"
    if api == "anthropic":
        model = "claude-sonnet-4-6"  # one llmock lists
        for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"):
            del settings[name]
        settings |= {
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": llm.base_url("anthropic"),
            "ANTHROPIC_MODEL": model,
        }
    ran = await run_bot(tmp_path, "--check", **settings)

    line = ran.line("model endpoint")
    assert line.startswith("ok")
    assert f"MODEL_API={api}: " in line
    assert f"{model} is" in line
    if api == "anthropic":
        assert f"{model} is listed" in line


@pytest.mark.parametrize("api", ["openai-chat", "anthropic"])
@pytest.mark.parametrize("reachable", [True, False], ids=["answers", "unreachable"])
async def test_the_model_check_never_prints_the_base_urls_credentials(
    slack: FakeSlack, llm: LLMock, tmp_path: Path, api: str, reachable: bool
) -> None:
    """A base URL with user info and an ``?api-key=`` (Azure-style gateways take one)
    is named by its host and path only, whether the endpoint answers or not."""
    password, key = "hunter2-gateway-pass", "k3y-in-the-query-9f8e7d"
    provider = "anthropic" if api == "anthropic" else "openai"
    base = llm.base_url(provider) if reachable else "http://127.0.0.1:9/v1"
    scheme, _, rest = base.partition("://")
    secret_url = f"{scheme}://gateway-user:{password}@{rest}?api-version=2025-01&api-key={key}"
    settings = {**good_settings(slack, llm.base_url(), tmp_path), "MODEL_API": api}
    if api == "anthropic":
        for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"):
            del settings[name]
        settings |= {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_MODEL": "claude-sonnet-4-6"}
        settings["ANTHROPIC_BASE_URL"] = secret_url
    else:
        settings["OPENAI_BASE_URL"] = secret_url

    ran = await run_bot(tmp_path, "--check", **settings)

    printed = ran.stdout + ran.stderr
    assert password not in printed and "gateway-user" not in printed
    assert key not in printed
    line = ran.line("model endpoint")
    assert rest.partition("/")[0] in line  # the host and port are still named
    assert "api-version=2025-01" in line and "api-key=***" in line


async def test_an_anthropic_setting_missing_is_named_with_the_api(tmp_path: Path) -> None:
    ran = await run_bot(
        tmp_path,
        "--check",
        SLACK_BOT_TOKEN="xoxb-check-test",
        SLACK_SIGNING_SECRET=SECRET,
        MODEL_API="anthropic",
        ANTHROPIC_API_KEY="test-key",
    )

    assert ran.status == 2
    assert ran.line("settings").startswith(
        "FAIL settings: ANTHROPIC_MODEL: missing (required with MODEL_API=anthropic): set it in "
    )


async def test_help_prints_the_usage(tmp_path: Path) -> None:
    ran = await run_bot(tmp_path, "--help")
    assert ran.status == 0
    assert "--check" in ran.stdout
    assert ".env.example" in ran.stdout
    assert "cp .env.example .env" in ran.stdout
    for path in ("/slack/events", "/healthz", "/readyz", "/metrics"):
        assert path in ran.stdout


async def test_mcp_servers_are_checked_without_showing_their_secrets(
    slack: FakeSlack, llm: LLMock, tmp_path: Path
) -> None:
    token, password, query = "tok-Vq3Rw8Zt5Yx1Kp7M", "pw-Ln4Bc9Xs2Df6", "qs-Gh7Jk2Mn5Pq8"
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "mcp.json"
    servers = {
        "wiki": {
            "url": f"http://ops:{password}@127.0.0.1:{port}/mcp/${{MCP_TOKEN}}?token={query}",
            "headers": {"Authorization": "Bearer ${MCP_TOKEN}"},
        },
        "tool": {"command": str(tmp_path / "no-such-${MCP_TOKEN}"), "args": ["${MCP_TOKEN}"]},
    }
    config.write_text(json.dumps({"mcpServers": servers}))

    ran = await run_bot(
        tmp_path,
        "--check",
        **good_settings(slack, llm.base_url(), tmp_path),
        MCP_CONFIG=str(config),
        MCP_TOKEN=token,
    )

    for secret in (token, password, query):
        assert secret not in ran.stdout + ran.stderr
    assert ran.line("MCP server wiki").startswith("FAIL")
    assert f"127.0.0.1:{port}/mcp/${{MCP_TOKEN}}" in ran.line("MCP server wiki")
    assert ran.line("MCP server tool").startswith("FAIL")
    assert "no-such-${MCP_TOKEN}" in ran.line("MCP server tool")


async def test_oauth_mode_checks_the_installations_and_warns_of_tokens_in_clear(
    slack: FakeSlack, llm: LLMock, tmp_path: Path
) -> None:
    settings = good_settings(slack, llm.base_url(), tmp_path)
    del settings["SLACK_BOT_TOKEN"]
    ran = await run_bot(
        tmp_path,
        "--check",
        **settings,
        SLACK_CLIENT_ID="1111.2222",
        SLACK_CLIENT_SECRET="client-secret",
    )

    assert all(CHECK_LINE.match(line) for line in ran.lines), ran.stdout
    assert not any("Slack bot token" in line for line in ran.lines)  # none to check
    assert ran.line("installations").startswith("ok")
    assert "none yet" in ran.line("installations")
    assert ran.line("token encryption").startswith("warn")
    assert "SLACK_TOKEN_KEY" in ran.line("token encryption")
    assert ran.status == 0  # a warning, not a failure
    assert not (tmp_path / "threadpilot.db").exists()
