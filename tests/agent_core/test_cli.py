"""``python -m agent_core run``, driven as a subprocess with real signals.

What it must do: docs/stopping.md, In a terminal.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import signal
import socket
import sys
from typing import TYPE_CHECKING, Any

from llmock.scenarios import Reply, StreamFault, ToolCall

from agent_core.terminal.cli import STOPPING_NOTICE
from tests.agent_core.helpers import offered_tools

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

LONG_TEXT = " ".join(f"word{i}" for i in range(40))
ANSI = re.compile(r"\x1b\[")


class Cli:
    """A running ``python -m agent_core run`` whose stderr can be awaited."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.stderr = ""
        self.stdout = ""

    @classmethod
    async def start(
        cls,
        llm: LLMock,
        *args: str,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        unset: Sequence[str] = (),
        stdin: int | None = None,
    ) -> Cli:
        """Start it with the model settings in its environment, then ``env``, less
        ``unset``; in ``cwd`` (by default the suite's scratch directory: no ``.env``);
        ``stdin``: a file descriptor (or ``subprocess.DEVNULL``), else the suite's own."""
        full_env = {
            **os.environ,
            "OPENAI_BASE_URL": llm.base_url(),
            "OPENAI_API_KEY": "test-key",
            "OPENAI_MODEL": "test-model",
            "LOG_LEVEL": "WARNING",
            **(env or {}),
        }
        full_env.pop("NO_COLOR", None)
        for name in unset:
            full_env.pop(name, None)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agent_core",
            "run",
            *args,
            stdin=stdin,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=full_env,
            cwd=cwd,
        )
        return cls(process)

    async def wait_for_stderr(self, needle: str) -> None:
        assert self.process.stderr is not None
        async with asyncio.timeout(30):
            while needle not in self.stderr:
                chunk = await self.process.stderr.read(4096)
                assert chunk, f"stderr closed before {needle!r} appeared:\n{self.stderr}"
                self.stderr += chunk.decode()

    async def wait_for_stdout(self, needle: str) -> None:
        assert self.process.stdout is not None
        async with asyncio.timeout(30):
            while needle not in self.stdout:
                chunk = await self.process.stdout.read(4096)
                assert chunk, f"stdout closed before {needle!r} appeared:\n{self.stdout}"
                self.stdout += chunk.decode()

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    async def finish(self) -> tuple[int, str]:
        async with asyncio.timeout(30):
            stdout, stderr = await self.process.communicate()
        self.stderr += stderr.decode()
        self.stdout += stdout.decode()
        assert self.process.returncode is not None
        return self.process.returncode, self.stdout

    async def finish_json(self) -> tuple[int, dict[str, Any]]:
        status, stdout = await self.finish()
        lines = stdout.strip().splitlines()
        assert len(lines) == 1, f"stdout should hold only the JSON object:\n{stdout}"
        result: dict[str, Any] = json.loads(lines[0])
        return status, result


async def test_a_finished_run_exits_0_with_the_json_object(llm: LLMock) -> None:
    llm.reply("Hello from the terminal.")
    cli = await Cli.start(llm, "say hello", "--json")
    status, result = await cli.finish_json()

    assert status == 0
    assert result["outcome"] == "finished"
    assert result["stop_reason"] is None
    assert result["exit_code"] == "EXIT-FINAL-ANSWER"
    assert result["summary"] == "Hello from the terminal."
    assert result["turns"] == 1
    assert result["ended_because"] == "completed"
    assert "Hello from the terminal." in cli.stderr  # streamed while it ran


async def test_the_terminal_runner_speaks_the_api_model_api_names(llm: LLMock) -> None:
    """MODEL_API=anthropic: the run goes to the Messages API with the ANTHROPIC_* settings
    (the OpenAI ones unset); an unknown API is one clear line."""
    llm.reply("Hello from Claude.")
    anthropic = {
        "MODEL_API": "anthropic",
        "ANTHROPIC_BASE_URL": llm.base_url("anthropic"),
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_MODEL": "claude-test",
    }
    unset = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL")
    cli = await Cli.start(llm, "say hello", "--json", env=anthropic, unset=unset)
    status, result = await cli.finish_json()

    assert status == 0
    assert result["summary"] == "Hello from Claude."
    (record,) = llm.requests
    assert record.path == "/anthropic/v1/messages"

    unknown = await Cli.start(llm, "hello", env={"MODEL_API": "gemini"})
    status, _ = await unknown.finish()
    assert status == 2
    assert unknown.stderr.strip().startswith("threadpilot: MODEL_API: 'gemini' is not one of")


async def test_plain_output_streams_the_answer_then_the_handoff(llm: LLMock) -> None:
    llm.reply("Plain answer.")
    status, stdout = await (await Cli.start(llm, "answer plainly")).finish()

    assert status == 0
    assert stdout.startswith("Plain answer.")
    assert "Outcome: Finished [EXIT-FINAL-ANSWER]" in stdout
    assert "Evidence: Plain answer." in stdout


async def test_ctrl_c_once_stops_with_a_final_turn(llm: LLMock) -> None:
    llm.add(
        Reply(text=LONG_TEXT, tool_calls=(ToolCall("calculate", {"expression": "1+1"}),)),
        StreamFault("stall", after_chunks=3, stall_seconds=0.5),
    )
    llm.reply("Stopped early; nothing was calculated.")
    cli = await Cli.start(llm, "add numbers", "--json")
    await cli.wait_for_stderr("word0")
    cli.signal(signal.SIGINT)
    await cli.wait_for_stderr(STOPPING_NOTICE)
    status, result = await cli.finish_json()

    assert status == 0
    assert result["outcome"] == "userinterlude"
    assert result["stop_reason"] == "stop"
    assert result["exit_code"] == "EXIT-USER-STOP"
    assert result["summary"] == "Stopped early; nothing was calculated."
    assert result["handoff"]["stopped_by"] == "terminal"
    assert result["ended_because"] == "user_exit"
    assert offered_tools(llm.requests[-1]) == ["final_report"]


async def test_ctrl_c_twice_aborts_and_closes_the_stream(llm: LLMock) -> None:
    llm.add(Reply(text=LONG_TEXT), StreamFault("stall", after_chunks=3))
    cli = await Cli.start(llm, "write a lot", "--json")
    await cli.wait_for_stderr("word0")
    cli.signal(signal.SIGINT)
    await cli.wait_for_stderr(STOPPING_NOTICE)
    cli.signal(signal.SIGINT)
    status, result = await cli.finish_json()

    assert status == 130
    assert result["outcome"] == "userinterlude"
    assert result["stop_reason"] == "abort"
    assert result["exit_code"] == "EXIT-USER-ABORT"
    assert result["ended_because"] == "user_exit"
    (record,) = llm.requests
    assert not record.completed


async def test_an_abort_is_labelled_as_people_read_it_in_terminal_words(llm: LLMock) -> None:
    llm.add(Reply(text=LONG_TEXT), StreamFault("stall", after_chunks=3))
    cli = await Cli.start(llm, "write a lot")
    await cli.wait_for_stdout("word0")
    cli.signal(signal.SIGINT)
    await cli.wait_for_stderr(STOPPING_NOTICE)
    cli.signal(signal.SIGINT)
    status, stdout = await cli.finish()

    assert status == 130
    assert "Outcome: User interlude: aborted by terminal [EXIT-USER-ABORT]" in stdout
    assert "Handoff: Nothing is running. Run the command again to start again." in stdout
    assert (
        "Evidence: Aborted during turn 1 while streaming the model's answer; the interrupted "
        "step was discarded. 1 model turn, no tool calls.\n"
    ) in stdout
    assert "Aborted" not in stdout.split("Outcome:")[1].splitlines()[0]
    assert "thread" not in stdout.lower()


async def test_sigterm_is_a_shutdown(llm: LLMock) -> None:
    llm.add(Reply(text=LONG_TEXT), StreamFault("stall", after_chunks=3))
    cli = await Cli.start(llm, "write a lot", "--json")
    await cli.wait_for_stderr("word0")
    cli.signal(signal.SIGTERM)
    status, result = await cli.finish_json()

    assert status == 143
    assert result["outcome"] == "blocked"
    assert result["stop_reason"] == "shutdown"
    assert result["exit_code"] == "EXIT-SHUTDOWN"
    assert result["ended_because"] == "shutdown"


async def test_sighup_is_a_shutdown_with_status_129(llm: LLMock) -> None:
    """The terminal closed (SIGHUP): a shutdown, checkpointed and resumable, not a
    person's exit; the status says which signal asked for it."""
    llm.add(Reply(text=LONG_TEXT), StreamFault("stall", after_chunks=3))
    cli = await Cli.start(llm, "write a lot", "--json")
    await cli.wait_for_stderr("word0")
    cli.signal(signal.SIGHUP)
    status, result = await cli.finish_json()

    assert status == 129
    assert result["outcome"] == "blocked"
    assert result["stop_reason"] == "shutdown"
    assert result["exit_code"] == "EXIT-SHUTDOWN"
    assert result["ended_because"] == "shutdown"
    assert result["handoff"]["stopped_by"] == "signal:SIGHUP"
    (record,) = llm.requests
    assert not record.completed  # the stream was closed, not waited out


async def test_a_rate_limit_past_the_retries_is_blocked_with_its_retry_after(llm: LLMock) -> None:
    llm.rate_limit(retry_after=600)  # longer than a run waits: no retry, no final turn
    status, result = await (await Cli.start(llm, "hello", "--json")).finish_json()

    assert status == 0  # blocked is not a failure
    assert [r.status for r in llm.requests] == [429]
    assert result["outcome"] == "blocked"
    assert result["ended_because"] == "rate_limit"
    assert result["retry_after_s"] == 600
    assert result["resume_after"] is not None
    # Nothing is stored in a terminal: nothing resumes it, a person runs it again.
    assert "checkpoint" not in result["handoff"]["evidence"]
    assert result["handoff"]["handoff"] == (
        "Nothing is running. Once 600 s has passed, run the command again to retry."
    )


async def test_a_failed_run_exits_1(llm: LLMock) -> None:
    llm.fail(401)
    status, result = await (await Cli.start(llm, "hello", "--json")).finish_json()

    assert status == 1
    assert result["outcome"] == "failed"
    assert result["exit_code"] == "EXIT-ERROR"
    assert result["ended_because"] == "error"


async def test_missing_configuration_is_one_clear_line_and_status_2(llm: LLMock) -> None:
    cli = await Cli.start(llm, "hello", env={"OPENAI_MODEL": ""})
    status, stdout = await cli.finish()

    assert status == 2
    assert stdout == ""
    (line,) = cli.stderr.strip().splitlines()
    assert line.startswith(
        "threadpilot: OPENAI_MODEL: missing (required with MODEL_API=openai-chat): "
        "set it in the environment or in "
    )
    assert llm.requests == []


async def test_every_missing_or_bad_setting_is_named_at_once(llm: LLMock) -> None:
    """As ``python -m bot`` does: one try names them all, the way the app names them."""
    cli = await Cli.start(
        llm,
        "hello",
        env={"TOOL_TIMEOUT": "soon", "MAX_TURNS": "lots"},
        unset=("OPENAI_API_KEY", "OPENAI_MODEL"),
    )
    status, stdout = await cli.finish()

    assert status == 2
    assert stdout == ""
    lines = cli.stderr.strip().splitlines()
    assert [line.split(": ", 2)[1] for line in lines] == [
        "OPENAI_API_KEY",
        "OPENAI_MODEL",
        "TOOL_TIMEOUT",
        "MAX_TURNS",
    ]
    assert "set it in the environment or in " in lines[0]
    assert llm.requests == []


async def test_run_help_says_where_settings_are_read(llm: LLMock) -> None:
    cli = await Cli.start(llm, "--help")
    status, stdout = await cli.finish()

    assert status == 0
    assert "from the environment and from .env in the\nworking directory" in stdout


async def test_an_unreachable_model_is_named_by_its_url_and_counts_no_turn(llm: LLMock) -> None:
    """Nothing listens at OPENAI_BASE_URL: the run says where it tried and which setting
    names it, counts no model turn, and does not just say to run the command again."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
        cli = await Cli.start(llm, "hello", "--json", env={"OPENAI_BASE_URL": url})
        status, result = await cli.finish_json()

    assert status == 1
    assert result["exit_code"] == "EXIT-MAX-RETRIES"
    assert result["turns"] == 0
    evidence, handoff = result["handoff"]["evidence"], result["handoff"]["handoff"]
    assert evidence.startswith("0 model turns, no tool calls.")
    assert f"could not reach the model at {url}/chat/completions (OPENAI_BASE_URL)" in evidence
    assert "ConnectionKey" not in evidence + cli.stderr
    assert handoff.startswith(f"Nothing reached the model at {url}/chat/completions: check")
    assert "OPENAI_BASE_URL" in handoff


async def test_settings_come_from_dotenv_in_the_working_directory(
    llm: LLMock, tmp_path: Path
) -> None:
    """As the app reads them: ``.env`` in the working directory, the environment winning."""
    (tmp_path / ".env").write_text(
        f"OPENAI_BASE_URL={llm.base_url()}\n"
        "OPENAI_API_KEY=key-from-dotenv\n"
        "OPENAI_MODEL=model-from-dotenv\n"
        "MAX_TURNS=1\n"
    )
    llm.reply("From the dotenv settings.")
    cli = await Cli.start(
        llm,
        "hello",
        "--json",
        cwd=tmp_path,
        unset=("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"),
    )
    status, result = await cli.finish_json()

    assert status == 0, cli.stderr
    assert result["summary"] == "From the dotenv settings."
    (record,) = llm.requests
    assert (record.body or {})["model"] == "model-from-dotenv"

    llm.reply("From the environment.")
    cli = await Cli.start(
        llm,
        "hello",
        "--json",
        cwd=tmp_path,
        env={"OPENAI_MODEL": "model-from-env"},
    )
    status, result = await cli.finish_json()
    assert status == 0, cli.stderr
    assert (llm.requests[-1].body or {})["model"] == "model-from-env"


async def test_an_empty_variable_of_the_environment_hides_the_dotenv_line(
    llm: LLMock, tmp_path: Path
) -> None:
    """docs/operations.md: the environment wins, and an empty value means the default,
    whatever ``.env`` says."""
    (tmp_path / ".env").write_text("MAX_TURNS=lots\nOPENAI_MODEL=model-from-dotenv\n")
    llm.reply("The default number of turns.")
    cli = await Cli.start(llm, "hello", "--json", cwd=tmp_path, env={"MAX_TURNS": ""})
    status, result = await cli.finish_json()

    assert status == 0, cli.stderr  # MAX_TURNS: the default, not the file's "lots"
    assert result["outcome"] == "finished"
    assert (llm.requests[-1].body or {})["model"] == "test-model"

    cli = await Cli.start(llm, "hello", cwd=tmp_path, env={"OPENAI_MODEL": "", "MAX_TURNS": ""})
    status, _ = await cli.finish()

    assert status == 2
    (line,) = cli.stderr.strip().splitlines()
    assert line.startswith("threadpilot: OPENAI_MODEL: missing")


async def test_a_bad_setting_in_dotenv_is_named(llm: LLMock, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("TOOL_TIMEOUT=soon\n")
    cli = await Cli.start(llm, "hello", cwd=tmp_path)
    status, _ = await cli.finish()

    assert status == 2
    (line,) = cli.stderr.strip().splitlines()
    assert line.startswith("threadpilot: TOOL_TIMEOUT: ")
    assert llm.requests == []


async def test_tool_calls_and_their_results_show_as_they_happen(llm: LLMock) -> None:
    llm.add(Reply(tool_calls=(ToolCall("calculate", {"expression": "6 * 7"}),)))
    llm.add(Reply(tool_calls=(ToolCall("calculate", {"expression": "1 / 0"}),)))
    llm.reply("It is 42.")
    cli = await Cli.start(llm, "compute", "--json")
    status, result = await cli.finish_json()

    assert status == 0
    assert result["summary"] == "It is 42."
    lines = [line for line in cli.stderr.splitlines() if line.strip()]
    started = lines.index('-> calculate {"expression": "6 * 7"}')
    assert lines[started + 1] == "<- calculate ok: 42"
    failed = lines.index('-> calculate {"expression": "1 / 0"}')
    assert lines[failed + 1] == (
        "<- calculate error: calculate raised ZeroDivisionError: division by zero"
    )
    assert not ANSI.search(cli.stderr + cli.stdout)  # piped: no colour


async def test_a_sub_agents_tool_calls_show_indented_under_it(llm: LLMock) -> None:
    delegate = ToolCall("delegate", {"task": "multiply six by seven", "tools": ["calculate"]})
    llm.add(Reply(tool_calls=(delegate,)))
    llm.add(Reply(tool_calls=(ToolCall("calculate", {"expression": "6 * 7"}),)))
    llm.reply("42")
    llm.reply("The child says 42.")
    cli = await Cli.start(llm, "delegate it", "--json")
    status, result = await cli.finish_json()

    assert status == 0, cli.stderr
    assert result["summary"] == "The child says 42."
    lines = [line for line in cli.stderr.splitlines() if line.strip()]
    child = next(i for i, line in enumerate(lines) if "=> sub-agent" in line)
    assert lines[child - 1].startswith("-> delegate ")
    assert lines[child + 1] == '  -> calculate {"expression": "6 * 7"}'
    assert lines[child + 2] == "  <- calculate ok: 42"
    assert "<= sub-agent" in lines[child + 3]
    assert lines[child + 4].startswith("<- delegate ok: ")


async def test_a_long_result_is_cut_to_one_short_line(llm: LLMock) -> None:
    llm.add(Reply(tool_calls=(ToolCall("calculate", {"expression": "7 ** 300"}),)))
    llm.reply("Big.")
    cli = await Cli.start(llm, "compute", "--json")
    await cli.finish_json()

    (shown,) = [line for line in cli.stderr.splitlines() if line.startswith("<- calculate")]
    assert shown.startswith("<- calculate ok: 3")
    assert shown.endswith("...")
    assert len(shown) <= 120


async def _stderr_on_a_terminal(llm: LLMock, env: dict[str, str]) -> str:
    """Run one task with stderr on a pseudo-terminal; what it wrote there."""
    controller, terminal = pty.openpty()
    full_env = {
        **os.environ,
        "OPENAI_BASE_URL": llm.base_url(),
        "OPENAI_API_KEY": "test-key",
        "OPENAI_MODEL": "test-model",
        "LOG_LEVEL": "WARNING",
        **env,
    }
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "agent_core", "run", "compute", "--json"),
            stdout=asyncio.subprocess.PIPE,
            stderr=terminal,
            env=full_env,
        )
    finally:
        os.close(terminal)

    def read_all() -> bytes:
        chunks: list[bytes] = []
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the terminal's last holder closed it
                return b"".join(chunks)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)

    try:
        async with asyncio.timeout(30):
            written, _ = await asyncio.gather(asyncio.to_thread(read_all), process.communicate())
    finally:
        os.close(controller)
    assert process.returncode == 0
    return written.decode()


async def test_on_a_terminal_tool_lines_are_coloured_unless_no_color(llm: LLMock) -> None:
    for _ in range(2):
        llm.add(Reply(tool_calls=(ToolCall("calculate", {"expression": "6 * 7"}),)))
        llm.reply("42.")
    coloured = await _stderr_on_a_terminal(llm, {})
    plain = await _stderr_on_a_terminal(llm, {"NO_COLOR": "1"})

    assert ANSI.search(coloured), coloured
    assert "calculate" in ANSI.sub("", coloured)
    assert not ANSI.search(plain), plain
    assert "<- calculate ok: 42" in plain
