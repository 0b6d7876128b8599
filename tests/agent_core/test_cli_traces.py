"""``python -m agent_core run`` honours the app's ``OTEL_*`` settings: it sends its run's
trace to the receiver as it exits (after a SIGTERM too), is unaffected by a receiver that
is down, and stops at a bad flag with one line naming it."""

from __future__ import annotations

import signal
import socket
from typing import TYPE_CHECKING

from llmock.scenarios import Reply, StreamFault

from tests.agent_core.test_cli import LONG_TEXT, Cli
from tests.fakes.otlp_receiver import OtlpReceiver

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from llmock.pytest_plugin import LLMock

import pytest

ROOT = "invoke_agent threadpilot"


@pytest.fixture
async def receiver() -> AsyncIterator[OtlpReceiver]:
    found = OtlpReceiver()
    await found.start()
    yield found
    await found.close()


async def test_sigterm_mid_stream_still_sends_the_runs_trace(
    llm: LLMock, receiver: OtlpReceiver
) -> None:
    llm.add(Reply(text=LONG_TEXT), StreamFault("stall", after_chunks=3))
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
    cli = await Cli.start(llm, "write a lot", "--json", env=env, unset=("OTEL_SERVICE_NAME",))
    await cli.wait_for_stderr("word0")
    cli.signal(signal.SIGTERM)
    status, result = await cli.finish_json()

    assert status == 143
    assert result["ended_because"] == "shutdown"
    # Sent before the process exited: nothing to wait for.
    (root,) = [s for s in receiver.spans if s.name == ROOT]
    assert root.service == "threadpilot"
    assert root.attributes["threadpilot.run.ended_because"] == "shutdown"
    assert root.attributes["threadpilot.run.exit_code"] == "EXIT-SHUTDOWN"
    assert root.attributes["gen_ai.request.model"] == "test-model"
    assert root.status_code == 0
    assert "threadpilot.shutdown" in [name for name, _ in root.events]
    (chat,) = [s for s in receiver.spans if s.name == "chat test-model"]
    assert chat.attributes["threadpilot.cancelled"] is True
    assert chat.status_code == 0


async def test_a_receiver_that_is_down_does_not_touch_the_run(
    llm: LLMock,
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    llm.reply("Hello anyway.")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
    cli = await Cli.start(llm, "say hello", "--json", env=env)
    status, result = await cli.finish_json()

    assert status == 0
    assert result["summary"] == "Hello anyway."


async def test_a_bad_tracing_flag_stops_start_up_naming_it(llm: LLMock) -> None:
    cli = await Cli.start(llm, "say hello", env={"OTEL_SDK_DISABLED": "maybe"})
    status, stdout = await cli.finish()

    assert status == 2
    assert stdout == ""
    assert cli.stderr.strip() == (
        "threadpilot: OTEL_SDK_DISABLED: must be true or false, not 'maybe'"
    )
