"""Log set-up: one format for every logger, context on every line, stdout left alone."""

from __future__ import annotations

import io
import json
import logging
from typing import TYPE_CHECKING

import structlog

from agent_core.logs import configure_logging

if TYPE_CHECKING:
    from collections.abc import Iterator

import pytest


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


@pytest.mark.usefixtures("restore_logging")
def test_json_lines_carry_bound_context_from_every_logger() -> None:
    out = io.StringIO()
    configure_logging("json", "INFO", out)
    with structlog.contextvars.bound_contextvars(run_id="r1", team="T1", user="U1"):
        structlog.get_logger("agent_core.loop").info("run.started", turn=1)
        logging.getLogger("slack_bolt.AsyncApp").warning("bolt said %s", "hi")
    structlog.get_logger("agent_core.loop").debug("too detailed")

    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["event"] for line in lines] == ["run.started", "bolt said hi"]
    for line in lines:
        assert (line["run_id"], line["team"], line["user"]) == ("r1", "T1", "U1")
        assert line["timestamp"].endswith("Z")
    assert lines[1]["logger"] == "slack_bolt.AsyncApp"


@pytest.mark.usefixtures("restore_logging")
def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="LOUD"):
        configure_logging("console", "LOUD")
