"""A Stop taken by the worker that does not run the run shows in the run's trace: the
worker that took it sends a span of its own linked to the run's trace, read from the run's
row (runs.trace_context). Two apps on one SQLite file, the real OTLP/HTTP exporter, and a
receiver decoding what it sends (tests/fakes/otlp_receiver.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core.process import tracing
from tests.bot.handlers.test_click_faults import status_stored, stop_requests, two_workers
from tests.bot.harness import SHORT_TEXT, WAIT_S, run_id_of, stalled_answer
from tests.bot.stopping.test_stop_service import native_stop
from tests.fakes.otlp_receiver import OtlpReceiver
from tests.fakes.slack_workspace import DEFAULT_USER

if TYPE_CHECKING:
    from llmock.pytest_plugin import LLMock

    from tests.bot.conftest import BotFactory

ROOT = "invoke_agent threadpilot"


async def test_a_stop_taken_by_the_other_worker_links_to_the_runs_trace(
    make_bot: BotFactory, llm: LLMock
) -> None:
    receiver = OtlpReceiver()
    await receiver.start()
    assert tracing.configure_tracing({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url})
    try:
        owner, other = await two_workers(make_bot)
        llm.add(*stalled_answer(1.0, text=SHORT_TEXT))
        llm.reply("Stopped from the other worker.")
        thread_ts, running = await owner.mention("check the time")
        run_id = run_id_of(running)
        await status_stored(owner, run_id)
        await owner.slack.wait_for_call("chat.startStream", timeout=WAIT_S)

        assert await native_stop(other, thread_ts) == 200
        assert await stop_requests(owner, run_id) == [("stop", DEFAULT_USER)]
        await owner.final(running)
        assert await tracing.flush_traces()
        spans = await receiver.until(
            lambda s: (
                any(x.name == ROOT for x in s)
                and any(x.name == "threadpilot.stop_request" for x in s)
            )
        )
    finally:
        await tracing.shutdown_tracing()
        await receiver.close()

    (root,) = [s for s in spans if s.name == ROOT]
    (taken,) = [s for s in spans if s.name == "threadpilot.stop_request"]
    assert root.attributes["threadpilot.run.id"] == run_id
    assert root.attributes["threadpilot.run.ended_because"] == "user_exit"
    assert root.attributes["gen_ai.conversation.id"].endswith(thread_ts)
    assert taken.trace_id != root.trace_id  # a trace of its own, linked
    assert taken.links == [root.trace_id]
    assert taken.attributes["threadpilot.run.id"] == run_id
    assert taken.attributes["threadpilot.stop.requested_by"] == DEFAULT_USER
    assert taken.attributes["threadpilot.stop.source"] == "native"
