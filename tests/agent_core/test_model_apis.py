"""What only the Responses and Anthropic adapters do: the conversation in their API's
shape, reasoning that travels with it (through a stored checkpoint too), and the events
each API sends when it gives up or declines mid-stream.

Against a real aiohttp server on loopback that records each request (its headers and
JSON body) and answers with the server-sent events a test gives, as the API writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import web

from agent_core.models.api import HTTPChatModel, ModelAPI, build_model
from agent_core.run.agent import Agent
from agent_core.run.steps import assistant_message
from agent_core.stores.memory import MemoryStore
from agent_core.tools.toolbox import FINAL_REPORT
from agent_core.values.chat import ModelRequest, ToolSpec
from agent_core.values.ended import EndedBecause
from agent_core.values.errors import (
    ContextOverflow,
    FatalModelError,
    RateLimited,
    RetryableModelError,
)
from agent_core.values.states import RunState
from tests.agent_core.test_stop import noop

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from agent_core.values.chat import ChatMessage

Refusal = tuple[int, bytes, dict[str, str]]

TOOL = ToolSpec("lookup", "Look a city up.", {"type": "object", "properties": {}})


@dataclass
class Scripted:
    """Answers each POST with the next body of ``answers``; keeps what it was sent."""

    answers: list[bytes | Refusal] = field(default_factory=list)
    """Each a streamed body, or a refusal: an HTTP status, a JSON body, its headers."""
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    base_url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(json.loads(await request.read()))
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        self.paths.append(request.path)
        answer = self.answers.pop(0)
        if isinstance(answer, tuple):
            status, body, headers = answer
            return web.Response(
                status=status, body=body, content_type="application/json", headers=headers
            )
        reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await reply.prepare(request)
        await reply.write(answer)
        await reply.write_eof()
        return reply


@pytest.fixture
async def scripted() -> AsyncIterator[Callable[..., Awaitable[tuple[Scripted, HTTPChatModel]]]]:
    runners: list[web.AppRunner] = []
    models: list[HTTPChatModel] = []

    async def start(api: ModelAPI, *answers: bytes | Refusal) -> tuple[Scripted, HTTPChatModel]:
        server = Scripted(list(answers))
        app = web.Application()
        app.router.add_post("/{tail:.*}", server.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        root = f"http://127.0.0.1:{runner.addresses[0][1]}"
        # ANTHROPIC_BASE_URL is the host's root; OPENAI_BASE_URL ends with /v1.
        server.base_url = root if api is ModelAPI.ANTHROPIC else root + "/v1"
        model = build_model(api, model="test-model", api_key="test-key", base_url=server.base_url)
        models.append(model)
        return server, model

    yield start
    for model in models:
        await model.aclose()
    for runner in runners:
        await runner.cleanup()


def events(*payloads: dict[str, Any]) -> bytes:
    """Server-sent events named by their ``type``, as both APIs send them."""
    return b"".join(f"event: {p['type']}\ndata: {json.dumps(p)}\n\n".encode() for p in payloads)


def responses_answer(*items: dict[str, Any], text: str = "") -> bytes:
    """A Responses stream: ``text`` as deltas, then each finished output item."""
    out: list[dict[str, Any]] = [{"type": "response.created", "response": {"status": "x"}}]
    if text:
        out.append({"type": "response.output_text.delta", "output_index": 0, "delta": text})
    for index, item in enumerate(items, start=1):
        out.append({"type": "response.output_item.added", "output_index": index, "item": item})
        out.append({"type": "response.output_item.done", "output_index": index, "item": item})
    usage = {
        "input_tokens": 11,
        "output_tokens": 7,
        "input_tokens_details": {"cached_tokens": 6},
        "output_tokens_details": {"reasoning_tokens": 3},
    }
    out.append({"type": "response.completed", "response": {"status": "completed", "usage": usage}})
    return events(*out)


def anthropic_answer(*blocks: dict[str, Any], stop: str = "end_turn") -> bytes:
    """An Anthropic stream of the given content blocks, streamed as the API streams them."""
    usage = {"input_tokens": 11, "output_tokens": 1, "cache_read_input_tokens": 4}
    out: list[dict[str, Any]] = [{"type": "message_start", "message": {"usage": usage}}]
    for index, block in enumerate(blocks):
        kind = block["type"]
        start = {**block, "text": ""} if kind == "text" else dict(block)
        if kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
        if kind == "tool_use":
            start = {**block, "input": {}}
        out.append({"type": "content_block_start", "index": index, "content_block": start})
        if kind == "text":
            delta = {"type": "text_delta", "text": block["text"]}
        elif kind == "thinking":
            delta = {"type": "thinking_delta", "thinking": block["thinking"]}
        elif kind == "tool_use":
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            delta = None
        if delta is not None:
            out.append({"type": "content_block_delta", "index": index, "delta": delta})
        if kind == "thinking":
            signature = {"type": "signature_delta", "signature": block["signature"]}
            out.append({"type": "content_block_delta", "index": index, "delta": signature})
        out.append({"type": "content_block_stop", "index": index})
    out.append(
        {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 7}}
    )
    out.append({"type": "message_stop"})
    return events(*out)


CONVERSATION: tuple[ChatMessage, ...] = (
    {"role": "system", "content": "You are threadpilot."},
    {"role": "user", "content": "Weather in Oslo?"},
    {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "21C"},
    {"role": "user", "content": "Also Bergen, please."},
    {"role": "system", "content": "Report now with final_report."},
)
FINAL_REQUEST = ModelRequest(CONVERSATION, tools=[FINAL_REPORT], tool_choice="final_report")


# -- the conversation in each API's shape ----------------------------------------------


async def test_the_responses_request_carries_the_conversation_as_input_items(
    scripted: Any,
) -> None:
    server, model = await scripted(ModelAPI.OPENAI_RESPONSES, responses_answer(text="ok"))
    await model.complete(FINAL_REQUEST, lambda _: None)

    (body,) = server.bodies
    assert server.paths == ["/v1/responses"]
    assert server.headers[0]["authorization"] == "Bearer test-key"
    assert body["input"] == [
        {"role": "system", "content": "You are threadpilot."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "Checking."},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "21C"},
        {"role": "user", "content": "Also Bergen, please."},
        {"role": "system", "content": "Report now with final_report."},
    ]
    assert [t["name"] for t in body["tools"]] == ["final_report"]
    assert body["tools"][0]["parameters"] == dict(FINAL_REPORT.parameters)
    assert body["tool_choice"] == {"type": "function", "name": "final_report"}
    assert body["stream"] is True and body["store"] is False
    assert body["include"] == ["reasoning.encrypted_content"]


async def test_the_anthropic_request_keeps_instructions_in_the_system_prompt(
    scripted: Any,
) -> None:
    server, model = await scripted(
        ModelAPI.ANTHROPIC, anthropic_answer({"type": "text", "text": "ok"})
    )
    await model.complete(FINAL_REQUEST, lambda _: None)

    (body,) = server.bodies
    assert server.paths == ["/v1/messages"]
    assert server.headers[0]["x-api-key"] == "test-key"
    assert server.headers[0]["anthropic-version"] == "2023-06-01"
    assert body["system"] == [
        {"type": "text", "text": "You are threadpilot."},
        {"type": "text", "text": "Report now with final_report."},
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "c1", "name": "lookup", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "21C"},
                {"type": "text", "text": "Also Bergen, please."},
            ],
        },
    ]
    assert body["tools"] == [
        {
            "name": "final_report",
            "description": FINAL_REPORT.description,
            "input_schema": dict(FINAL_REPORT.parameters),
        }
    ]
    assert body["tool_choice"] == {"type": "tool", "name": "final_report"}
    assert body["max_tokens"] > 0


async def test_a_model_without_encrypted_reasoning_is_asked_again_without_it(
    scripted: Any,
) -> None:
    """OpenAI refuses ``include: [reasoning.encrypted_content]`` for a model that does not
    reason (gpt-4o...): the same call asks again without it, and later calls never ask."""
    refusal = {
        "error": {
            "message": "Encrypted content is not supported with this model.",
            "type": "invalid_request_error",
            "param": "include",
            "code": None,
        }
    }
    server, model = await scripted(
        ModelAPI.OPENAI_RESPONSES,
        (400, json.dumps(refusal).encode(), {}),
        responses_answer(text="first"),
        responses_answer(text="second"),
    )
    texts: list[str] = []
    assert (await model.complete(FINAL_REQUEST, texts.append)).text == "first"
    assert (await model.complete(FINAL_REQUEST, texts.append)).text == "second"

    assert texts == ["first", "second"]  # the refused request streamed nothing
    assert [b.get("include") for b in server.bodies] == [
        ["reasoning.encrypted_content"],
        None,
        None,
    ]


async def test_other_refusals_are_not_asked_again(scripted: Any) -> None:
    refusal = {"error": {"message": "Invalid schema for function", "code": None}}
    server, model = await scripted(
        ModelAPI.OPENAI_RESPONSES, (400, json.dumps(refusal).encode(), {})
    )
    with pytest.raises(FatalModelError, match="Invalid schema"):
        await model.complete(FINAL_REQUEST, lambda _: None)
    assert len(server.bodies) == 1


# -- reasoning travels with the conversation -------------------------------------------

REASONING_ITEM = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [],
    "encrypted_content": "gAAAA-opaque",
}
THINKING = {"type": "thinking", "thinking": "Oslo first.", "signature": "sig-123"}
REDACTED = {"type": "redacted_thinking", "data": "opaque-blob"}


async def next_request_after_a_checkpoint(
    scripted: Any, api: ModelAPI, first: bytes, second: bytes
) -> tuple[Scripted, list[ChatMessage]]:
    """One reply with a tool call; its conversation stored as a checkpoint stores it
    (JSON) and read back; the next request sent from that."""
    server, model = await scripted(api, first, second)
    request = ModelRequest(CONVERSATION[:2], tools=[TOOL])
    response = await model.complete(request, lambda _: None)
    (call,) = response.tool_calls
    conversation = [
        *CONVERSATION[:2],
        assistant_message(response),
        {"role": "tool", "tool_call_id": call.id, "content": "21C"},
    ]
    restored = json.loads(json.dumps(conversation))
    await model.complete(ModelRequest(restored, tools=[TOOL]), lambda _: None)
    return server, restored


async def test_responses_reasoning_items_go_back_with_the_conversation(scripted: Any) -> None:
    call = {"type": "function_call", "call_id": "c9", "name": "lookup", "arguments": "{}"}
    server, _ = await next_request_after_a_checkpoint(
        scripted,
        ModelAPI.OPENAI_RESPONSES,
        responses_answer(REASONING_ITEM, call),
        responses_answer(text="21C in Oslo."),
    )
    assert server.bodies[1]["input"][2:] == [
        REASONING_ITEM,
        call,
        {"type": "function_call_output", "call_id": "c9", "output": "21C"},
    ]


async def test_anthropic_thinking_goes_back_with_its_signature(scripted: Any) -> None:
    use = {"type": "tool_use", "id": "toolu_9", "name": "lookup", "input": {"city": "Oslo"}}
    server, _ = await next_request_after_a_checkpoint(
        scripted,
        ModelAPI.ANTHROPIC,
        anthropic_answer(THINKING, REDACTED, use, stop="tool_use"),
        anthropic_answer({"type": "text", "text": "21C in Oslo."}),
    )
    assistant = server.bodies[1]["messages"][1]
    assert assistant == {"role": "assistant", "content": [THINKING, REDACTED, use]}


async def test_reasoning_from_another_api_is_left_out(scripted: Any) -> None:
    """A conversation written on one API and continued on another: the reasoning only
    its own API can read is not sent to the other (Chat Completions has no place for it,
    and it would be refused)."""
    _, restored = await next_request_after_a_checkpoint(
        scripted,
        ModelAPI.OPENAI_RESPONSES,
        responses_answer(
            REASONING_ITEM,
            {"type": "function_call", "call_id": "c9", "name": "lookup", "arguments": "{}"},
        ),
        responses_answer(text="done"),
    )
    assert restored[2]["reasoning"]["api"] == "openai-responses"
    chat_server, chat = await scripted(
        ModelAPI.OPENAI_CHAT,
        b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
        b"data: [DONE]\n\n",
    )
    claude_server, claude = await scripted(ModelAPI.ANTHROPIC, anthropic_answer())
    await chat.complete(ModelRequest(restored), lambda _: None)
    await claude.complete(ModelRequest(restored), lambda _: None)

    assert "reasoning" not in chat_server.bodies[0]["messages"][2]
    assert [b["type"] for b in claude_server.bodies[0]["messages"][1]["content"]] == ["tool_use"]


@pytest.mark.parametrize(
    ("api", "reasoning", "first"),
    [
        (
            ModelAPI.OPENAI_RESPONSES,
            REASONING_ITEM,
            responses_answer(
                REASONING_ITEM,
                {"type": "function_call", "call_id": "c9", "name": "noop", "arguments": "{}"},
            ),
        ),
        (
            ModelAPI.ANTHROPIC,
            THINKING,
            anthropic_answer(
                THINKING,
                {"type": "tool_use", "id": "toolu_9", "name": "noop", "input": {}},
                stop="tool_use",
            ),
        ),
    ],
    ids=["openai-responses", "anthropic"],
)
async def test_a_resumed_run_sends_the_reasoning_of_its_checkpoint(
    scripted: Any, api: ModelAPI, reasoning: dict[str, Any], first: bytes
) -> None:
    """The real loop and store: a reply with reasoning and a tool call; the next request
    is refused with a Retry-After too long to wait, so the run ends blocked at its
    checkpoint; the run resumed from the stored checkpoint sends the reasoning again."""
    limited = json.dumps({"error": {"message": "slow down"}}).encode()
    server, model = await scripted(api, first, (429, limited, {"retry-after": "300"}))
    store = MemoryStore()
    agent = Agent(model, [noop], store=store)  # 300 s is past what a run waits in place
    run = agent.new_run("tidy up")
    result = await run.run()
    assert result.ended_because is EndedBecause.RATE_LIMIT

    checkpoint = await store.latest_checkpoint(run.id)
    assert checkpoint is not None
    assert await store.set_state(run.id, RunState.QUEUED, expected=[RunState.BLOCKED])
    server.answers.append(
        responses_answer(text="Tidied.")
        if api is ModelAPI.OPENAI_RESPONSES
        else anthropic_answer({"type": "text", "text": "Tidied."})
    )
    resumed = agent.new_run(
        "tidy up", run_id=run.id, restore=checkpoint, resumed_because=EndedBecause.RATE_LIMIT
    )
    again = await resumed.run()

    assert again.final_text == "Tidied."
    last = server.bodies[-1]
    sent = (
        last["input"]
        if api is ModelAPI.OPENAI_RESPONSES
        else [block for turn in last["messages"] for block in turn["content"]]
    )
    assert sent.count(reasoning) == 1


# -- usage, refusals and mid-stream failures -------------------------------------------


async def test_usage_of_each_reply_counts_the_cached_prompt(scripted: Any) -> None:
    _, claude = await scripted(ModelAPI.ANTHROPIC, anthropic_answer({"type": "text", "text": "a"}))
    _, responses = await scripted(ModelAPI.OPENAI_RESPONSES, responses_answer(text="a"))
    claude_usage = (await claude.complete(FINAL_REQUEST, lambda _: None)).usage
    responses_usage = (await responses.complete(FINAL_REQUEST, lambda _: None)).usage
    assert (claude_usage.prompt_tokens, claude_usage.completion_tokens) == (15, 7)
    assert (responses_usage.prompt_tokens, responses_usage.completion_tokens) == (11, 7)
    # Parts of those totals, where the API says: read from the prompt cache, reasoning.
    assert (claude_usage.cached_tokens, claude_usage.reasoning_tokens) == (4, 0)
    assert (responses_usage.cached_tokens, responses_usage.reasoning_tokens) == (6, 3)


async def test_a_refusal_is_the_answer_the_person_reads(scripted: Any) -> None:
    refusal = events(
        {"type": "response.refusal.delta", "output_index": 0, "delta": "I can't help with that."},
        {"type": "response.completed", "response": {"status": "completed", "usage": {}}},
    )
    _, responses = await scripted(ModelAPI.OPENAI_RESPONSES, refusal)
    _, claude = await scripted(
        ModelAPI.ANTHROPIC,
        anthropic_answer({"type": "text", "text": "I can't help with that."}, stop="refusal"),
    )
    _, chat = await scripted(
        ModelAPI.OPENAI_CHAT,
        b'data: {"choices": [{"index": 0, "delta": {"refusal": "I can\'t help with that."}}]}\n\n'
        b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
        b"data: [DONE]\n\n",
    )
    for model in (chat, responses, claude):
        texts: list[str] = []
        response = await model.complete(FINAL_REQUEST, texts.append)
        assert "".join(texts) == response.text == "I can't help with that."
    assert response.finish_reason == "refusal"  # Anthropic's says so


@pytest.mark.parametrize(
    ("api", "event", "error"),
    [
        (
            ModelAPI.OPENAI_RESPONSES,
            {
                "type": "response.failed",
                "response": {"error": {"code": "server_error", "message": "try again"}},
            },
            RetryableModelError,
        ),
        (
            ModelAPI.OPENAI_RESPONSES,
            {"type": "error", "code": "rate_limit_exceeded", "message": "slow down"},
            RateLimited,
        ),
        (
            ModelAPI.OPENAI_RESPONSES,
            {
                "type": "response.failed",
                "response": {"error": {"code": "context_length_exceeded", "message": "too long"}},
            },
            ContextOverflow,
        ),
        (
            ModelAPI.OPENAI_RESPONSES,
            {"type": "error", "code": "invalid_prompt", "message": "refused prompt"},
            FatalModelError,
        ),
        (
            ModelAPI.ANTHROPIC,
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            RetryableModelError,
        ),
        (
            ModelAPI.ANTHROPIC,
            {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
            RateLimited,
        ),
        (
            ModelAPI.ANTHROPIC,
            {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}},
            FatalModelError,
        ),
    ],
)
async def test_an_error_mid_stream_maps_to_the_core_taxonomy(
    scripted: Any, api: ModelAPI, event: dict[str, Any], error: type[Exception]
) -> None:
    server, model = await scripted(api, events(event))
    texts: list[str] = []
    with pytest.raises(error) as caught:
        await model.complete(FINAL_REQUEST, texts.append)
    assert type(caught.value) is error
    assert len(server.bodies) == 1
