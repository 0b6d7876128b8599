"""``GET /metrics`` on the real app (docs/operations.md, Metrics).

Scraped as Prometheus would, and parsed with the client library's own parser: a run
started by a mention and stopped by a click moves the live-runs gauge, the run and stop
counters, the click's ack histogram and the Slack call counters, with the labels a
dashboard would select on; so do a model retry, a 429, and an MCP call cancelled by an
Abort. Both transports serve it, on ``PORT`` or, with ``METRICS_PORT``, on a listener of
its own.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest
from llmock.scenarios import Reply, ToolCall
from prometheus_client.parser import text_string_to_metric_families

from agent_core import Agent, Prices, Usage
from agent_core.values.chat import ModelResponse
from bot.observe.metrics import Metrics
from tests.bot.harness import (
    ACTION_ABORT,
    ACTION_STOP,
    SHORT_TEXT,
    WAIT_S,
    block_text,
    stalled_answer,
)
from tests.bot.process.test_app_transports import SOCKET_MODE
from tests.bot.runs.test_mcp_app import write_config
from tests.fakes import slack_requests
from tests.fakes.mcp_server import FakeMcpServer, serve_http
from tests.fakes.slack_workspace import DEFAULT_CHANNEL, DEFAULT_WORKSPACE
from tests.system.workers import free_port, until_async

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from llmock.pytest_plugin import LLMock

    from agent_core.ports import TextSink
    from agent_core.values.chat import ModelRequest
    from tests.bot.conftest import BotFactory
    from tests.bot.harness import Bot

SERIES = {
    "threadpilot_live_runs": "gauge",
    "threadpilot_queued_runs": "gauge",
    "threadpilot_event_loop_lag_seconds": "gauge",
    "threadpilot_runs_ended": "counter",
    "threadpilot_stop_requests": "counter",
    "threadpilot_click_ack_seconds": "histogram",
    "threadpilot_slack_api_calls": "counter",
    "threadpilot_slack_api_rate_limited": "counter",
    "threadpilot_model_retries": "counter",
    "threadpilot_model_requests": "counter",
    "threadpilot_model_tokens": "counter",
    "threadpilot_model_cost_usd": "counter",
    "threadpilot_mcp_calls": "counter",
    "threadpilot_mcp_cancellations": "counter",
    "threadpilot_approvals": "counter",
    "threadpilot_approval_wait_seconds": "histogram",
}

TEAM = DEFAULT_WORKSPACE.team_id
"""The workspace the Slack calls are counted under."""


class Scrape:
    """One ``GET /metrics``, parsed."""

    def __init__(self, text: str) -> None:
        self.families = {f.name: f for f in text_string_to_metric_families(text)}

    def value(self, sample: str, **labels: str) -> float:
        """The sample named ``sample`` with exactly these labels; 0 if there is none
        (a labelled counter has no sample until it first counts)."""
        for family in self.families.values():
            for s in family.samples:
                if s.name == sample and s.labels == labels:
                    return s.value
        return 0.0


async def scrape(bot: Bot) -> Scrape:
    async with bot.http.get(f"{bot.url}/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        return Scrape(await response.text())


async def test_a_run_stopped_by_a_click_moves_the_series(bot: Bot, llm: LLMock) -> None:
    before = await scrape(bot)
    assert {name: f.type for name, f in before.families.items()} == SERIES
    assert before.value("threadpilot_live_runs") == 0
    assert before.value("threadpilot_queued_runs") == 0
    assert "durable queue" in before.families["threadpilot_queued_runs"].documentation
    llm.add(*stalled_answer(0.3, text=SHORT_TEXT))
    llm.reply("Stopped early: the time was not checked.")

    _, status = await bot.mention("check the time")
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)
    live = bot.live_run(status)
    assert live is not None and live.task is not None
    assert (await scrape(bot)).value("threadpilot_live_runs") == 1
    assert await bot.click(status, ACTION_STOP) == 200
    await bot.final(status)
    await asyncio.wait_for(live.task, WAIT_S)  # the run has left the supervisor
    after = await scrape(bot)

    assert after.value("threadpilot_live_runs") == 0
    ended = {"outcome": "userinterlude", "ended_because": "user_exit"}
    assert after.value("threadpilot_runs_ended_total", **ended) == 1
    asked = {"kind": "stop", "source": "button", "verdict": "stop"}
    assert after.value("threadpilot_stop_requests_total", **asked) == 1
    ack = "threadpilot_click_ack_seconds"
    assert after.value(f"{ack}_count", control="stop") == 1
    assert 0 < after.value(f"{ack}_sum", control="stop") < 3.0
    assert after.value(f"{ack}_bucket", control="stop", le="+Inf") == 1
    assert after.value(f"{ack}_count", control="abort") == 0
    # The mention is no control: not timed.
    assert {s.labels["control"] for s in after.families[ack].samples} == {"stop"}
    # Every one of the run's Slack calls went through the budget, and was counted.
    for method in ("chat.postMessage", "chat.update", "chat.startStream"):
        sent = len(bot.slack.calls(method))
        assert sent >= 1
        calls = after.value("threadpilot_slack_api_calls_total", team=TEAM, method=method)
        assert calls == sent
    assert after.value("threadpilot_model_retries_total") == 0


async def test_a_model_retry_and_a_slack_429_are_counted(bot: Bot, llm: LLMock) -> None:
    llm.fail(503)
    llm.reply("All done on the second try.")
    bot.slack.fail_next("agents.sessions.setStatus", status=429, retry_after=1)

    _, status = await bot.mention("try twice")
    final = await bot.settled(status)
    after = await scrape(bot)

    assert "All done on the second try." in block_text(final)
    assert after.value("threadpilot_model_retries_total") == 1
    assert after.value("threadpilot_model_requests_total", api="openai-chat") == 2
    limited = "threadpilot_slack_api_rate_limited_total"
    assert after.value(limited, team=TEAM, method="agents.sessions.setStatus") == 1
    assert after.value(limited, team=TEAM, method="chat.update") == 0
    ended = {"outcome": "finished", "ended_because": "completed"}
    assert after.value("threadpilot_runs_ended_total", **ended) == 1


@pytest.mark.parametrize(
    "settings",
    [
        {"MODEL_API": "openai-responses"},
        {
            "MODEL_API": "anthropic",
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_MODEL": "claude-test",
            "OPENAI_API_KEY": None,
            "OPENAI_MODEL": None,
        },
    ],
    ids=["openai-responses", "anthropic"],
)
async def test_each_model_api_answers_in_slack_and_labels_its_model_calls(
    make_bot: BotFactory, llm: LLMock, settings: dict[str, str | None]
) -> None:
    api = settings["MODEL_API"]
    assert api is not None
    if api == "anthropic":
        settings = {**settings, "ANTHROPIC_BASE_URL": llm.base_url("anthropic")}
    bot = await make_bot(**settings)
    llm.reply("Answered through the API.")

    _, status = await bot.mention("which API?")
    final = await bot.settled(status)
    after = await scrape(bot)

    assert "Answered through the API." in block_text(final)
    (request,) = llm.requests
    assert request.path == ("/anthropic/v1/messages" if api == "anthropic" else "/v1/responses")
    assert after.value("threadpilot_model_requests_total", api=api) == 1
    assert after.value("threadpilot_model_requests_total", api="openai-chat") == 0
    assert after.value("threadpilot_model_tokens_total", api=api, kind="completion") > 0


async def test_socket_mode_serves_metrics_and_times_its_clicks(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(**SOCKET_MODE)
    await bot.slack.socket.wait_connected()
    llm.add(*stalled_answer(0.3, text=SHORT_TEXT))
    llm.reply("Stopped over Socket Mode.")
    envelope = slack_requests.app_mention("check the time")
    await bot.slack.socket.wait_for_ack(await bot.socket_event(envelope))
    status = await bot.status_message(DEFAULT_CHANNEL, envelope["event"]["ts"])
    await bot.slack.wait_for_call("chat.startStream", timeout=WAIT_S)

    response_url = bot.slack.new_response_url(status.channel, status.ts)
    click = slack_requests.click_button(status, ACTION_STOP, response_url=response_url)
    await bot.slack.socket.wait_for_ack(await bot.slack.socket.send_envelope("interactive", click))
    asked = {"kind": "stop", "source": "button", "verdict": "stop"}

    async def counted() -> Scrape | None:
        # After the ack (and the click's answer on its message): the request is counted.
        scraped = await scrape(bot)
        return scraped if scraped.value("threadpilot_stop_requests_total", **asked) else None

    after = await until_async(counted, what="the stop request to be counted")

    ack = "threadpilot_click_ack_seconds"
    assert after.value(f"{ack}_count", control="stop") == 1
    assert after.value(f"{ack}_bucket", control="stop", le="+Inf") == 1
    assert {s.labels["control"] for s in after.families[ack].samples} == {"stop"}
    assert after.value("threadpilot_stop_requests_total", **asked) == 1


@pytest.fixture
async def mcp_server() -> AsyncIterator[FakeMcpServer]:
    server = FakeMcpServer()
    yield server
    server.release()  # a slow call still waiting must not hold the server's shutdown


@pytest.fixture
async def mcp_url(mcp_server: FakeMcpServer) -> AsyncIterator[str]:
    async with serve_http(mcp_server) as url:
        yield url


async def test_an_mcp_call_cancelled_by_abort_is_counted(
    mcp_url: str, mcp_server: FakeMcpServer, make_bot: BotFactory, llm: LLMock, tmp_path: Path
) -> None:
    bot = await make_bot(MCP_CONFIG=write_config(tmp_path, {"fake": {"url": mcp_url}}))
    llm.call_tool("fake__slow", {"steps": 2})
    _, status = await bot.mention("run the slow job")
    await bot.until(status, lambda m: "waiting for the go-ahead" in block_text(m))
    during = await scrape(bot)

    assert await bot.click(status, ACTION_ABORT) == 200
    await bot.final(status)
    await mcp_server.until(lambda: mcp_server.cancelled, "the server to see the call cancelled")
    after = await scrape(bot)

    assert during.value("threadpilot_mcp_calls_total", server="fake") == 1
    assert during.value("threadpilot_mcp_cancellations_total", server="fake") == 0
    assert after.value("threadpilot_mcp_calls_total", server="fake") == 1
    assert after.value("threadpilot_mcp_cancellations_total", server="fake") == 1
    asked = {"kind": "abort", "source": "button", "verdict": "abort"}
    assert after.value("threadpilot_stop_requests_total", **asked) == 1
    assert after.value("threadpilot_click_ack_seconds_count", control="abort") == 1
    ended = {"outcome": "userinterlude", "ended_because": "user_exit"}
    assert after.value("threadpilot_runs_ended_total", **ended) == 1


async def test_metrics_port_moves_metrics_off_the_public_port(make_bot: BotFactory) -> None:
    bot = await make_bot(METRICS_PORT=free_port())
    assert bot.app.metrics_port is not None
    private = f"http://127.0.0.1:{bot.app.metrics_port}"

    assert await bot.get("/metrics") == 404  # the port Slack (and the world) reaches
    assert await bot.get("/healthz") == 200  # a load balancer's check still answers there
    async with bot.http.get(f"{private}/metrics") as response:
        scrape = Scrape(await response.text())
    assert "threadpilot_live_runs" in scrape.families
    for path in ("/healthz", "/readyz"):
        async with bot.http.get(f"{private}{path}") as response:
            assert response.status == 200, path
    # METRICS_HOST defaults to 127.0.0.1: another address of this very host is refused.
    with pytest.raises(OSError):
        _, writer = await asyncio.open_connection("127.0.0.2", bot.app.metrics_port)
        writer.close()


async def test_tokens_are_counted_by_kind_and_cost_when_priced(
    make_bot: BotFactory, llm: LLMock
) -> None:
    bot = await make_bot(MODEL_PRICE_INPUT="2000", MODEL_PRICE_OUTPUT="8000")
    llm.add(Reply(tool_calls=(ToolCall("current_time", {}),)))
    llm.reply("It is noon.")
    before = await scrape(bot)
    assert before.families["threadpilot_model_cost_usd"].type == "counter"

    _, status = await bot.mention("what time is it?")
    final = await bot.settled(status)
    after = await scrape(bot)

    prompt = after.value("threadpilot_model_tokens_total", api="openai-chat", kind="prompt")
    completion = after.value("threadpilot_model_tokens_total", api="openai-chat", kind="completion")
    assert prompt > 0 and completion > 0
    # Both replies, as the final message counts them.
    assert f"· {int(prompt + completion)} tokens · 1 tool call" in block_text(final)
    cost = after.value("threadpilot_model_cost_usd_total", api="openai-chat")
    assert cost == pytest.approx((prompt * 2000 + completion * 8000) / 1_000_000)


async def test_without_prices_no_cost_is_counted(bot: Bot, llm: LLMock) -> None:
    llm.reply("Free of charge.")
    _, status = await bot.mention("hello")
    await bot.settled(status)
    after = await scrape(bot)
    assert after.value("threadpilot_model_tokens_total", api="openai-chat", kind="prompt") > 0
    assert after.value("threadpilot_model_cost_usd_total", api="openai-chat") == 0


class _CachingModel:
    """A model whose one reply reads most of its prompt from the cache, and reasons."""

    async def complete(self, request: ModelRequest, on_text: TextSink) -> ModelResponse:
        usage = Usage(100, 20, cached_tokens=60, reasoning_tokens=5)
        return ModelResponse("Done.", (), "stop", usage)


async def test_cached_and_reasoning_tokens_are_counted_as_kinds_of_their_own() -> None:
    metrics = Metrics(model_api="openai-responses", prices=Prices(1_000, 4_000))
    run = Agent(_CachingModel()).new_run("answer")
    metrics.watch_run(run)
    await run.run()

    scraped = Scrape(metrics.render().decode())
    tokens = {
        kind: scraped.value("threadpilot_model_tokens_total", api="openai-responses", kind=kind)
        for kind in ("prompt", "completion", "cached", "reasoning")
    }
    assert tokens == {"prompt": 100, "completion": 20, "cached": 60, "reasoning": 5}
    cost = scraped.value("threadpilot_model_cost_usd_total", api="openai-responses")
    assert cost == pytest.approx((100 * 1_000 + 20 * 4_000) / 1_000_000)
