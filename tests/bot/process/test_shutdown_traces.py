"""The app's traces across a shutdown and the restart that resumes the run: shutting down
(what SIGTERM does) sends the interrupted run's trace once it is checkpointed, and the
resumed run is a new trace linked to it. The real app with the fake Slack, llmock, a
SQLite file, the real OTLP/HTTP exporter and a receiver decoding what it sends."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core.process import tracing
from tests.bot.harness import SHORT_TEXT, WAIT_S, is_final, run_id_of, stalled_answer
from tests.bot.workers.test_resume import start_with_one_turn, text_of
from tests.fakes.otlp_receiver import OtlpReceiver
from tests.fakes.slack_workspace import DEFAULT_CHANNEL

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory
    from tests.fakes.slack_api import FakeSlack

ROOT = "invoke_agent threadpilot"


async def test_a_shutdown_sends_the_runs_trace_and_its_resume_links_to_it(
    make_bot: BotFactory, llm: LLMock
) -> None:
    receiver = OtlpReceiver()
    await receiver.start()
    assert tracing.configure_tracing({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url})
    try:
        first = await make_bot()
        thread_ts, status = await start_with_one_turn(
            first, llm, *stalled_answer(30.0, text=SHORT_TEXT)
        )

        def streaming(slack: FakeSlack) -> bool:
            thread = slack.thread(DEFAULT_CHANNEL, thread_ts)
            return any(m.stream is not None and "Let me" in (m.text or "") for m in thread)

        assert await first.slack.wait_until(streaming, timeout=WAIT_S)
        run_id = run_id_of(status)
        await first.app.shutdown()
        # Sent by the shutdown itself, after the run's checkpoint: nothing to flush here.
        (interrupted,) = [s for s in receiver.spans if s.name == ROOT]

        llm.reply("Resumed and done.")
        restarted = await make_bot()
        await restarted.until(status, lambda m: is_final(m) and "Resumed" in text_of(m))
        assert await tracing.flush_traces()
        spans = await receiver.until(lambda s: sum(x.name == ROOT for x in s) == 2)
    finally:
        await tracing.shutdown_tracing()
        await receiver.close()

    assert interrupted.attributes["threadpilot.run.id"] == run_id
    assert interrupted.attributes["threadpilot.run.ended_because"] == "shutdown"
    assert interrupted.status_code == 0
    chats = [s for s in spans if s.name.startswith("chat ") and s.trace_id == interrupted.trace_id]
    assert chats[-1].attributes["threadpilot.cancelled"] is True
    (resumed,) = [s for s in spans if s.name == ROOT and s is not interrupted]
    assert resumed.attributes["threadpilot.run.id"] == run_id
    assert resumed.trace_id != interrupted.trace_id
    assert resumed.links == [interrupted.trace_id]
    assert resumed.attributes["threadpilot.run.ended_because"] == "completed"
