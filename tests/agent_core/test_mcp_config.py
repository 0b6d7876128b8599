"""``MCP_CONFIG`` and ``SERVER__TOOL`` names (docs/operations.md): unit tests, no server started."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from agent_core.tools.mcp import (
    MAX_TOOL_NAME,
    HttpServer,
    StdioServer,
    assign_tool_names,
    load_mcp_config,
    parse_mcp_config,
    tool_name,
)
from agent_core.values.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

ENV = {"TOKEN": "s3cret", "EMPTY": "", "HOME": "/home/bot"}


def test_the_common_shape_gives_stdio_and_http_servers(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "git": {
                        "command": "mcp-server-git",
                        "args": ["--repository", "${HOME}/repo"],
                        "env": {"GIT_TOKEN": "${TOKEN}", "MODE": "${MODE:-fast}"},
                        "cwd": "/srv",
                    },
                    "time": {"type": "stdio", "command": "mcp-server-time"},
                    "wiki": {
                        "type": "http",
                        "url": "https://wiki.example.com/mcp",
                        "headers": {"Authorization": "Bearer ${TOKEN}", "X-Why": "${EMPTY:-none}"},
                    },
                }
            }
        )
    )

    servers = load_mcp_config(path, ENV)

    assert servers == (
        StdioServer(
            "git",
            "mcp-server-git",
            ("--repository", "/home/bot/repo"),
            {"GIT_TOKEN": "s3cret", "MODE": "fast"},
            "/srv",
        ),
        StdioServer("time", "mcp-server-time"),
        HttpServer(
            "wiki",
            "https://wiki.example.com/mcp",
            {"Authorization": "Bearer s3cret", "X-Why": "none"},
        ),
    )


def test_only_the_two_common_forms_are_expanded() -> None:
    [server] = parse_mcp_config(
        {"mcpServers": {"s": {"command": "run", "args": ["$TOKEN", "${TOKEN}x", "$${TOKEN}"]}}},
        ENV,
    )
    assert isinstance(server, StdioServer)
    assert server.args == ("$TOKEN", "s3cretx", "$s3cret")


def test_an_empty_file_lists_no_servers() -> None:
    assert parse_mcp_config({"mcpServers": {}}, ENV) == ()


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ([], 'the file must hold an object {"mcpServers": {"NAME": {...}}}'),
        ({"servers": {}}, 'the file must hold an object {"mcpServers": {"NAME": {...}}}'),
        (
            {"mcpServers": {"s": "mcp-server-time"}},
            "server 's': must be an object with a command or a url",
        ),
        (
            {"mcpServers": {"s": {}}},
            "server 's': needs exactly one of command (stdio) or url (streamable HTTP)",
        ),
        (
            {"mcpServers": {"s": {"command": "x", "url": "http://h/mcp"}}},
            "server 's': needs exactly one of command (stdio) or url (streamable HTTP)",
        ),
        ({"mcpServers": {"s": {"command": ""}}}, "server 's': command must be a non-empty string"),
        (
            {"mcpServers": {"s": {"command": "x", "args": "-v"}}},
            "server 's': args must be a list of strings",
        ),
        (
            {"mcpServers": {"s": {"command": "x", "env": {"N": 1}}}},
            "server 's': env must be an object of strings",
        ),
        (
            {"mcpServers": {"s": {"command": "x", "arg": ["-v"]}}},
            "server 's': unknown key 'arg' "
            "(allowed: approval, args, command, cwd, env, tools, type)",
        ),
        (
            {"mcpServers": {"s": {"url": "http://h/mcp", "env": {}}}},
            "server 's': unknown key 'env' (allowed: approval, headers, tools, type, url)",
        ),
        (
            {"mcpServers": {"s": {"type": "sse", "url": "http://h/sse"}}},
            "server 's': type 'sse' is not supported (use stdio, http or streamable-http)",
        ),
        (
            {"mcpServers": {"s": {"type": "http", "command": "x"}}},
            "server 's': type 'http' does not go with a command",
        ),
        (
            {"mcpServers": {"s": {"url": "ftp://h/mcp"}}},
            "server 's': url must start with http:// or https://, not 'ftp://h/mcp'",
        ),
        (
            {"mcpServers": {"s": {"command": "x", "env": {"K": "${NOPE}"}}}},
            "server 's': ${NOPE} is not set in the environment",
        ),
        ({"mcpServers": {" ": {"command": "x"}}}, "a server has an empty name"),
    ],
)
def test_a_malformed_file_or_entry_is_one_line_naming_the_setting_and_the_entry(
    document: object, problem: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_mcp_config(document, ENV)

    assert str(raised.value) == f"MCP_CONFIG: {problem}"
    assert "\n" not in str(raised.value)


def test_a_missing_or_broken_file_names_the_setting_and_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^MCP_CONFIG: cannot read .*nope\.json: No such file"):
        load_mcp_config(tmp_path / "nope.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"mcpServers": {')
    with pytest.raises(ConfigError, match=r"^MCP_CONFIG: .*broken\.json is not valid JSON: "):
        load_mcp_config(broken)


# -- names -------------------------------------------------------------------------------


def test_a_tool_is_offered_as_server__tool_with_unsafe_characters_replaced() -> None:
    assert tool_name("time", "get_current_time") == "time__get_current_time"
    assert tool_name("my.wiki", "search pages/v2") == "my_wiki__search_pages_v2"
    assert tool_name("ünï", "tool-1") == "_n___tool-1"


def test_names_are_cut_to_64_characters() -> None:
    name = tool_name("s" * 40, "t" * 40)
    assert name == "s" * 40 + "__" + "t" * 22
    assert len(name) == MAX_TOOL_NAME


def test_colliding_names_are_settled_the_same_way_whatever_the_order() -> None:
    pairs = [("a.b", "x"), ("a_b", "x"), ("a b", "x"), ("long", "t" * 70), ("long", "t" * 71)]
    names = assign_tool_names(pairs)
    again = assign_tool_names(reversed(pairs))

    assert names == again
    assert len(set(names.values())) == len(pairs)
    assert names[("a b", "x")] == "a_b__x"  # first in sorted order keeps the plain name
    assert all(len(n) <= MAX_TOOL_NAME for n in names.values())
    assert names[("a.b", "x")].startswith("a_b__x_")
    assert names[("long", "t" * 71)].startswith("long__ttt")
    assert len(names[("long", "t" * 71)]) == MAX_TOOL_NAME


def test_a_name_already_taken_by_another_tool_is_not_reused() -> None:
    names = assign_tool_names([("final", "report")], taken={"final__report"})
    assert names[("final", "report")] != "final__report"
    assert names[("final", "report")].startswith("final__report_")
