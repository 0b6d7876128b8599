"""The app's secrets out of its tool servers' reach, as the app runs (docs/security.md).

A real ``python -m bot`` worker runs as an ordinary user, as the container image runs it:
``nobody`` when the tests run as root (as in CI), else the tests' own user. Its settings
hold secrets in its environment (``SLACK_BOT_TOKEN``, ``DATABASE_URL``) and in the
``.env`` of its working directory (``OPENAI_API_KEY``). It starts a hostile stdio MCP
server of ours (:mod:`tests.fakes.mcp_snoop`) and the model calls its tool, which tries
every way to read them: the worker's ``/proc`` entries (environ, cmdline, memory, working
directory), ``./.env`` and ``../.env``, its own environment. None of the secrets may
reach it.

``python -m agent_core run`` protects itself the same way: another process of its user
cannot read its ``/proc/<pid>/environ``. Run as root, the worker says once at start-up
that tool servers could read its secrets.

Running as ``nobody`` needs that user to reach the interpreter and this checkout. Under
``CI=true`` the test grants search permission to the directories on the way that lack it
(a CI clone under ``/root``), restores them afterwards, and fails with a clear message if
it still cannot; elsewhere it skips with that message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import shutil
import signal
import site
import stat
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from tests.system.conftest import running_cluster
from tests.system.workers import REPO, WAIT_S, WorkerProcess, until

if TYPE_CHECKING:
    from collections.abc import Iterator

    from llmock.journal import Journal
    from llmock.pytest_plugin import LLMock

    from tests.fakes.slack_api import FakeSlack

pytestmark = pytest.mark.slow

MARK = "tpsecret"
"""Every secret here contains it: the hostile server searches the worker's memory for it
(as an attacker would search for ``xoxb-``), without knowing the secrets themselves."""
READ_BY_PROC = ("parent_environ", "parent_memory", "parent_cwd_env")
"""The worker's /proc entries that a process which is not dumpable keeps to itself (its
``cmdline`` stays readable by all, as ``ps`` needs: the app takes no secret as an argument)."""
PROBE_MODULES = "import bot.process.app, agent_core, mcp, llmock, tests.fakes.mcp_snoop"


@dataclass(frozen=True)
class Account:
    uid: int
    gid: int

    @property
    def switched(self) -> bool:
        return self.uid != os.geteuid()

    @property
    def worker_user(self) -> tuple[int, int] | None:
        """For :class:`WorkerProcess`: None when the tests already run as this account."""
        return (self.uid, self.gid) if self.switched else None

    def spawn_options(self) -> dict[str, Any]:
        """What subprocess needs to run a process as this account."""
        if not self.switched:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


@dataclass(frozen=True)
class Secrets:
    slack_bot_token: str
    openai_api_key: str
    database_url: str

    @classmethod
    def fresh(cls, home: Path) -> Secrets:
        tag = f"{MARK}-{uuid.uuid4().hex[:16]}"
        return cls(f"xoxb-{tag}", f"sk-{tag}-key", f"sqlite:///{home}/{tag}.db")

    @property
    def values(self) -> tuple[str, ...]:
        return (self.slack_bot_token, self.openai_api_key, self.database_url)

    def assert_none_in(self, text: str, where: str) -> None:
        for secret in self.values:
            assert secret not in text, f"a secret reached {where}"


def unavailable(problem: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(problem)
    pytest.skip(f"{problem} (set CI=true to let the test set it up, or make this a failure)")


def _blocking_dirs(paths: list[Path]) -> list[Path]:
    """The directories on the way to ``paths`` that others may not search."""
    blocked: list[Path] = []
    for path in paths:
        for directory in [*reversed(path.parents), path]:
            if directory.is_dir() and not directory.stat().st_mode & stat.S_IXOTH:
                if directory not in blocked:
                    blocked.append(directory)
    return blocked


@contextlib.contextmanager
def reachable_by_others() -> Iterator[None]:
    """Let other users reach the interpreter, its packages and this checkout (search
    permission on the directories on the way), under CI only; restored afterwards."""
    needed = [Path(os.path.realpath(sys.executable)), Path(sys.prefix), Path(sys.base_prefix)]
    needed += [Path(p) for p in site.getsitepackages()] + [REPO]
    blocked = _blocking_dirs(needed)
    if blocked and os.environ.get("CI") != "true":
        unavailable(f"other users cannot search {', '.join(map(str, blocked))}")
    modes = {d: d.stat().st_mode for d in blocked}
    try:
        for directory, mode in modes.items():
            directory.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
        yield
    finally:
        for directory, mode in modes.items():
            directory.chmod(stat.S_IMODE(mode))


@pytest.fixture
def account() -> Iterator[Account]:
    """An ordinary user who can run this checkout's app: ``nobody`` under root."""
    if os.geteuid() != 0:
        yield Account(os.getuid(), os.getgid())
        return
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        unavailable("there is no user 'nobody' to run the app as an ordinary user")
    chosen = Account(nobody.pw_uid, nobody.pw_gid)
    with reachable_by_others():
        ran = subprocess.run(
            [sys.executable, "-c", PROBE_MODULES],
            env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)},
            cwd="/",
            capture_output=True,
            text=True,
            check=False,
            **chosen.spawn_options(),
        )
        if ran.returncode != 0:
            tail = (ran.stderr.strip().splitlines() or ["(no output)"])[-1]
            unavailable(
                f"the user 'nobody' cannot run {sys.executable} with this checkout "
                f"({REPO}): {tail}; it needs read access to the interpreter, its packages "
                "and the checkout, and search access to the directories on the way"
            )
        yield chosen


@pytest.fixture
def home(account: Account) -> Iterator[Path]:
    """The worker's working directory, its account's own."""
    path = Path(tempfile.mkdtemp(prefix="threadpilot-secrets-"))
    os.chown(path, account.uid, account.gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def write_owned(path: Path, text: str, account: Account, mode: int = 0o600) -> None:
    path.write_text(text)
    os.chown(path, account.uid, account.gid)
    path.chmod(mode)


def snoop_config(home: Path, account: Account) -> str:
    path = home / "mcp.json"
    server = {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_snoop"],
        "env": {"PYTHONPATH": str(REPO)},
    }
    write_owned(path, json.dumps({"mcpServers": {"snoop": server}}), account, 0o644)
    return str(path)


def snoop_report(journal: Journal) -> dict[str, Any]:
    """The hostile server's report, as the model received it."""
    second = journal.records()[1]
    (content,) = [m["content"] for m in second.body["messages"] if m["role"] == "tool"]
    report: dict[str, Any] = json.loads(content)
    return report


async def test_a_hostile_tool_server_cannot_read_the_workers_secrets(
    slack: FakeSlack, llm: LLMock, journal: Journal, account: Account, home: Path
) -> None:
    secrets = Secrets.fresh(home)
    write_owned(home / ".env", f"OPENAI_API_KEY={secrets.openai_api_key}\n", account)
    llm.call_tool("snoop__snoop", {"needle": MARK})
    llm.reply("Nothing to report.")

    async with running_cluster(slack, llm, secrets.database_url, home) as cluster:
        env = cluster.settings(
            "a",
            SLACK_BOT_TOKEN=secrets.slack_bot_token,
            DATABASE_URL=secrets.database_url,
            MCP_CONFIG=snoop_config(home, account),
        )
        del env["OPENAI_API_KEY"]  # from the .env in its working directory
        worker = WorkerProcess("a", env, home, cluster.http, user=account.worker_user)
        cluster.workers["a"] = worker
        await worker.start()
        await worker.wait_ready()
        _, status = await cluster.mention(worker, "look around")
        final = await cluster.final(status)
        await until(lambda: len(journal.records()) == 2, what="the model's two requests")
        report = snoop_report(journal)

        assert worker.process is not None
        assert report["ppid"] == worker.process.pid  # it snooped on the worker itself
        assert report["uid"] == account.uid  # as the worker's own user
        assert worker.logged("mcp.server_started", server="snoop")
        assert not worker.logged("secrets.readable_by_tool_servers")

    secrets.assert_none_in(json.dumps(report), "the tool server")
    for way in READ_BY_PROC:
        assert "PermissionError" in report[way].get("error", ""), (way, report[way])
    assert report["cwd"] != str(home) and report["cwd_entries"] == []
    assert not await asyncio.to_thread(os.path.exists, report["cwd"])  # gone with it
    secrets.assert_none_in(json.dumps([c.args for c in slack.calls()]), "Slack")
    assert "Nothing to report." in json.dumps(final.blocks)


async def test_the_terminal_runner_cannot_be_read_by_another_process_of_its_user(
    llm: LLMock, journal: Journal, account: Account, home: Path
) -> None:
    secrets = Secrets.fresh(home)
    llm.delay(30.0)  # the run waits on its model request while we look
    llm.reply("Done.")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(REPO),
        "OPENAI_API_KEY": secrets.openai_api_key,
        "OPENAI_BASE_URL": llm.base_url(),
        "OPENAI_MODEL": "test-model",
    }
    runner = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent_core",
        "run",
        "say hello",
        env=env,
        cwd=home,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        **account.spawn_options(),
    )
    try:
        await until(lambda: journal.in_flight == 1, what="the runner's model request")
        looking = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            f"print(open('/proc/{runner.pid}/environ').read())",
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            **account.spawn_options(),
        )
        async with asyncio.timeout(WAIT_S):
            out, err = await looking.communicate()
    finally:
        runner.send_signal(signal.SIGTERM)
        async with asyncio.timeout(WAIT_S):
            await runner.wait()

    secrets.assert_none_in(out.decode(), "another process of its user")
    assert "PermissionError" in err.decode()


async def test_run_as_root_the_worker_warns_once_that_tool_servers_could_read_its_secrets(
    slack: FakeSlack, llm: LLMock, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the warning is about running as root; these tests are not")
    url = f"sqlite:///{tmp_path}/tp.db"
    async with running_cluster(slack, llm, url, tmp_path) as cluster:
        (worker,) = await cluster.start("a")

        (warning,) = worker.logged("secrets.readable_by_tool_servers")

    assert warning["level"] == "warning"
    assert "ordinary user" in warning["fix"] and "docs/security.md" in warning["fix"]
