"""``python -m bot --forget-user UXXXX`` as an admin runs it: a real process and a real
SQLite file (docs/operations.md, Retention and backups)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pytest

from agent_core.stores.sqlite import SqliteStore
from agent_core.values.records import Checkpoint, ResumeState, RunRecord, ThreadKey
from agent_core.values.states import RunState
from tests.bot.harness import SECRET
from tests.bot.process.test_check import run_bot

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


def settings(path: Path) -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": "xoxb-forget-test",
        "SLACK_SIGNING_SECRET": SECRET,
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_MODEL": "test-model",
        "DATABASE_URL": f"sqlite:///{path}",
    }


def run(run_id: str, requester: str, state: RunState) -> RunRecord:
    thread = ThreadKey("T1", "C1", f"1700000000.{len(run_id):06d}")
    return RunRecord(run_id, thread, requester, f"task of {run_id}", state=state)


async def test_forget_user_deletes_their_ended_runs_and_says_what_it_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "threadpilot.db"
    store = await SqliteStore.open(str(path))
    try:
        for record in (
            run("theirs-1", "U0FORGET1", RunState.FINISHED),
            run("theirs-2", "U0FORGET1", RunState.FAILED),
            run("theirs-live", "U0FORGET1", RunState.RUNNING),
            run("someone-elses", "U0OTHER01", RunState.FINISHED),
        ):
            await store.create_run(record)
            await store.set_resume(record.id, ResumeState.DECLINED, expected=[None])
            await store.save_checkpoint(Checkpoint(record.id, 1, ({"content": "private"},)))
    finally:
        await store.close()

    ran = await run_bot(tmp_path, "--forget-user", "U0FORGET1", **settings(path))

    assert (ran.status, ran.stderr) == (0, "")
    assert ran.lines == [
        "U0FORGET1: 2 ended runs deleted; 1 kept (live, or with a resume ahead): stop them, "
        "then run this again"
    ]
    store = await SqliteStore.open(str(path))
    try:
        assert {r.id for r in await store.find_runs()} == {"theirs-live", "someone-elses"}
        assert await store.latest_checkpoint("theirs-1") is None
        assert await store.latest_checkpoint("someone-elses") is not None
    finally:
        await store.close()


async def test_forget_user_refuses_what_is_not_a_user_id(tmp_path: Path) -> None:
    ran = await run_bot(tmp_path, "--forget-user", "everyone", **settings(tmp_path / "x.db"))
    assert ran.status == 2
    assert ran.stderr.strip() == (
        "threadpilot: --forget-user wants a Slack user id such as U012AB3CD, not 'everyone'"
    )
    assert ran.stdout == ""


async def test_forget_user_in_one_workspace_keeps_their_runs_in_another(tmp_path: Path) -> None:
    path = tmp_path / "threadpilot.db"
    store = await SqliteStore.open(str(path))
    try:
        here = run("here", "U0FORGET1", RunState.FINISHED)
        there = run("there", "U0FORGET1", RunState.FINISHED)
        for record, team in ((here, "T0HERE001"), (there, "T0THERE01")):
            record = dataclasses.replace(
                record, thread=dataclasses.replace(record.thread, team=team)
            )
            await store.create_run(record)
            await store.set_resume(record.id, ResumeState.DECLINED, expected=[None])
    finally:
        await store.close()

    ran = await run_bot(
        tmp_path, "--forget-user", "U0FORGET1", "--team", "T0HERE001", **settings(path)
    )

    assert (ran.status, ran.stderr) == (0, "")
    assert ran.lines == ["U0FORGET1 in T0HERE001: 1 ended run deleted"]
    store = await SqliteStore.open(str(path))
    try:
        assert {r.id for r in await store.find_runs()} == {"there"}
    finally:
        await store.close()
    refused = await run_bot(
        tmp_path, "--forget-user", "U0FORGET1", "--team", "all", **settings(path)
    )
    assert refused.status == 2
    assert "--team wants a Slack team id" in refused.stderr
