"""The suite does not read the developer's own settings.

A newcomer follows the README: writes ``.env`` in the clone (for the app, or for trying
the agent in a terminal), exports ``OPENAI_API_KEY`` and ``OPENAI_MODEL``, then runs the
tests from there. The tests that start ``python -m agent_core`` or build ``Settings``
must give the same results: ``tests/conftest.py`` runs every test in a scratch working
directory with the threadpilot settings taken out of the environment.

Checked the honest way: pytest itself, started in a copy of the clone that holds such a
``.env`` and with such an environment, on tests that would read them if they could.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

NEWCOMERS_DOTENV = """\
SLACK_BOT_TOKEN=xoxb-newcomer
SLACK_SIGNING_SECRET=newcomer-secret
OPENAI_API_KEY=sk-newcomer
OPENAI_MODEL=gpt-newcomer
OPENAI_BASE_URL=http://127.0.0.1:9/v1
MAX_TURNS=lots
FINAL_TURN_TIMEOUT=soon
MCP_CONFIG=/nonexistent/newcomer-mcp.json
DATABASE_URL=sqlite:////nonexistent/threadpilot.db
"""
NEWCOMERS_EXPORTS = {
    "OPENAI_API_KEY": "sk-exported",
    "OPENAI_MODEL": "gpt-exported",
    "TOOL_TIMEOUT": "7",
    "MCP_CONFIG": "/nonexistent/exported-mcp.json",
    "LOG_LEVEL": "DEBUG",
}
READERS = (
    # The one the newcomer met: OPENAI_MODEL came back from their .env.
    "tests/agent_core/test_cli.py::test_missing_configuration_is_one_clear_line_and_status_2",
    "tests/agent_core/test_cli.py::test_a_finished_run_exits_0_with_the_json_object",
    "tests/agent_core/test_tool_limits.py::test_the_terminal_runner_refuses_a_bad_tool_timeout",
    # Settings built in the test process, from its environment.
    "tests/bot/runs/test_tool_freeze.py::"
    "test_the_tool_timeout_setting_defaults_to_120_s_and_must_be_positive",
)


def test_a_newcomers_dotenv_and_exported_settings_change_no_test_result(tmp_path: Path) -> None:
    # The packages come from the install; the tests and their settings from the copy.
    clone = tmp_path / "clone"
    shutil.copytree(ROOT / "tests", clone / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", clone)
    (clone / ".env").write_text(NEWCOMERS_DOTENV)
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *READERS],
        cwd=clone,
        env={**os.environ, **NEWCOMERS_EXPORTS},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )

    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"{len(READERS)} passed" in ran.stdout
