"""Server-sent events, decoded incrementally from the bytes of a streamed HTTP body.

The model adapter reads the body as it arrives and feeds each piece here. Pieces split
anywhere: in the middle of a line, between the CR and LF of a line end, or between the
lines of one event. An event is dispatched at its blank line. Its ``data:`` lines are
joined with LF, and comments (``:`` lines) and the ``id``/``retry`` fields are skipped.
Lines may end with LF, CRLF or a lone CR. An event the body ends in the middle of (no
blank line after it) is discarded, as the SSE rules say: the caller sees the stream end
without it.

The common case, one ``data:`` line per event and one event per network read, is one
``split`` and a few slices: no per-byte work in Python. A line that spans many reads is
gathered in a ``bytearray`` (each piece is copied in once, not the whole line again with
every piece), and is split only once its end has come.

The stream is someone else's: an event, or a line not yet ended, may not grow past
``max_event_bytes``. Past it the decoder raises
:class:`agent_core.values.errors.RetryableModelError` rather than keep the bytes.
"""

from __future__ import annotations

from agent_core.values.errors import RetryableModelError

__all__ = ["SSEDecoder", "ServerSentEvent"]


class ServerSentEvent:
    """One dispatched event: its ``event`` name (None if the stream gave none) and its
    ``data`` (the joined ``data:`` lines, as bytes)."""

    __slots__ = ("data", "event")

    def __init__(self, event: str | None, data: bytes) -> None:
        self.event = event
        self.data = data


class SSEDecoder:
    """Feed it the body's bytes in any pieces; it returns the events completed so far."""

    def __init__(self, max_event_bytes: int = 8 * 1024 * 1024) -> None:
        self._max = max_event_bytes
        self._tail = bytearray()
        """The start of a line whose end has not arrived yet."""
        self._skip_lf = False
        """The last piece ended with CR: an LF at the start of the next one belongs to it."""
        self._data: list[bytes] = []
        self._size = 0
        """The bytes of ``_data``: the event dispatched at the next blank line."""
        self._event: str | None = None

    def feed(self, piece: bytes) -> list[ServerSentEvent]:  # noqa: C901
        """The events that ``piece`` completes. One function over the bytes, on purpose: it
        runs for every network read of every open stream, the hot path of a chunk's CPU."""
        if self._skip_lf:
            self._skip_lf = False
            if piece[:1] == b"\n":
                piece = piece[1:]
        if self._tail:
            self._tail += piece
            if b"\n" not in piece and b"\r" not in piece:
                self._check(self._size + len(self._tail))  # the line goes on: no split yet
                return []
            piece = bytes(self._tail)
            self._tail.clear()
        if b"\r" in piece:
            self._skip_lf = piece[-1:] == b"\r"
            piece = piece.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = piece.split(b"\n")
        tail = lines.pop()
        if tail:
            self._tail += tail
        events: list[ServerSentEvent] = []
        for line in lines:
            if not line:
                if self._data:
                    events.append(ServerSentEvent(self._event, b"\n".join(self._data)))
                    self._data = []
                    self._size = 0
                self._event = None
            elif line[:5] == b"data:":
                data = line[6:] if line[5:6] == b" " else line[5:]
                self._size += len(data) + 1
                if self._size > self._max:
                    self._check(self._size)
                self._data.append(data)
            elif line[:6] == b"event:":
                value = line[7:] if line[6:7] == b" " else line[6:]
                self._event = value.decode("utf-8", "replace")
            # Anything else: a comment (":"), "id", "retry" or an unknown field.
        if self._tail:
            self._check(self._size + len(self._tail))
        return events

    def _check(self, size: int) -> None:
        """Refuse an unfinished event (its data lines and its open line) past the limit."""
        if size > self._max:
            raise RetryableModelError(
                f"the model stream sent an event over {self._max} bytes: refused"
            )
