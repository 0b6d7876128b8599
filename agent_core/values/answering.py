"""Which store calls a person is waiting on, so a store can serve them first."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["ANSWERING", "answering"]

ANSWERING: ContextVar[bool] = ContextVar("threadpilot_answering", default=False)
"""True in the calls a person is waiting on: a click, between its receipt and its
acknowledgement (:func:`answering`). A store may serve them ahead of its background work;
PostgreSQL gives them connections of their own, so they never queue for the pool behind
the runs' writes."""


@contextmanager
def answering() -> Iterator[None]:
    """The store calls made inside (and in tasks started inside) answer a person now."""
    token = ANSWERING.set(True)
    try:
        yield
    finally:
        ANSWERING.reset(token)
