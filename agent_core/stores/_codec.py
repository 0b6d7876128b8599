"""Rows <-> records for the SQL adapters, so SQLite and PostgreSQL read and write alike.

The checks on what callers pass (which fields ``set_state`` and ``update_run`` may write,
``find_runs``' filters) live here too, and the memory store applies them as well, so
every adapter refuses the same calls.

Values leave here in a driver-neutral form: timestamps as aware UTC datetimes, JSON as
text, enums as their string values. Each adapter adds only what its driver needs
(SQLite turns datetimes into text with :func:`sqlite_time`). Column names used in SQL
are taken from the tuples below, never from callers, so building statements from them
is safe.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from agent_core.values.budget import Spent
from agent_core.values.ended import EndedBecause
from agent_core.values.outcomes import ExitCode, normalize_outcome
from agent_core.values.records import (
    ApprovalRecord,
    ApprovalStatus,
    AuditEvent,
    Checkpoint,
    GuidanceRecord,
    GuidanceStatus,
    ResumeState,
    RunRecord,
    StopRequestRecord,
    ThreadKey,
)
from agent_core.values.states import LIVE_STATES, TERMINAL_STATES, RunState, check_moves, sources
from agent_core.values.stop import StopReason

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

__all__ = [
    "CHECKPOINT_COLUMNS",
    "EVENT_COLUMNS",
    "GUIDANCE_COLUMNS",
    "RUN_COLUMNS",
    "STOP_COLUMNS",
    "ResumeChange",
    "Row",
    "RunQuery",
    "approval_decided",
    "approval_from_row",
    "approval_values",
    "checkpoint_from_row",
    "checkpoint_values",
    "event_from_row",
    "event_values",
    "from_db_time",
    "guidance_from_row",
    "guidance_settled",
    "guidance_values",
    "resume_change",
    "run_changes",
    "run_from_row",
    "run_query",
    "run_updates",
    "run_values",
    "sqlite_time",
    "stop_from_row",
    "stop_values",
    "to_utc",
    "with_ended_because",
]

RUN_COLUMNS = (
    "id",
    "team",
    "channel",
    "thread_ts",
    "requester",
    "task",
    "state",
    "parent_id",
    "owner",
    "lease_expires_at",
    "status_ts",
    "outcome",
    "stop_reason",
    "exit_code",
    "stopped_by",
    "result",
    "created_at",
    "updated_at",
    "final_posted_at",
    "ended_because",
    "continued_from",
    "auto_resumes",
    "resume",
    "resume_at",
    "resume_reason",
    "resume_by",
    "trace_context",
    "enterprise_id",
)
STOP_COLUMNS = (
    "id",
    "run_id",
    "team",
    "channel",
    "thread_ts",
    "kind",
    "requested_by",
    "status",
    "requested_at",
    "handled_at",
)
GUIDANCE_COLUMNS = (
    "id",
    "run_id",
    "team",
    "channel",
    "thread_ts",
    "author",
    "text",
    "message_ts",
    "status",
    "queued_at",
    "settled_at",
)
CHECKPOINT_COLUMNS = ("run_id", "turn", "messages", "created_at", "started", "spent")
EVENT_COLUMNS = ("run_id", "kind", "actor", "at", "detail")

# RunRecord fields that set_state and update_run may change. ``id`` names the row,
# ``updated_at`` is the store's to set, and ``state`` moves by set_state's ``new`` alone.
_E = TypeVar("_E", bound=StrEnum)

_CHANGEABLE = frozenset(f.name for f in dataclasses.fields(RunRecord)) - {
    "id",
    "state",
    "updated_at",
}


class Row(Protocol):
    """What both drivers' rows offer: lookup by column name."""

    def __getitem__(self, key: str, /) -> Any: ...


# -- scalars --------------------------------------------------------------------------


def to_utc(value: datetime) -> datetime:
    """The same instant in UTC. Naive datetimes are refused: their zone is a guess."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime {value.isoformat()}: pass a timezone-aware one")
    return value.astimezone(UTC)


def sqlite_time(value: datetime) -> str:
    """UTC ISO-8601 text with a fixed width, e.g. ``2025-01-02T03:04:05.000006+00:00``.

    SQLite has no timestamp type. Fixed width and one offset make text order the same as
    time order, so ``WHERE lease_expires_at <= ?`` and ``ORDER BY`` work on the text,
    and the file stays readable with the ``sqlite3`` shell.
    """
    return to_utc(value).isoformat(timespec="microseconds")


def sqlite_params(values: Sequence[Any]) -> tuple[Any, ...]:
    """Statement parameters for SQLite: each time as :func:`sqlite_time` text."""
    return tuple(sqlite_time(v) if isinstance(v, datetime) else v for v in values)


def from_db_time(value: datetime | str | None) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return to_utc(value)


def _time(value: datetime | str) -> datetime:
    result = from_db_time(value)
    assert result is not None
    return result


def _opt_time(value: datetime | None) -> datetime | None:
    return None if value is None else to_utc(value)


def _dump(value: Any) -> str:
    # Compact, and ASCII escapes for control characters (json.dumps always escapes them),
    # so a stray NUL in model output cannot break PostgreSQL's text input.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _opt_dump(value: Any) -> str | None:
    return None if value is None else _dump(dict(value))


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def _opt_enum(kind: type[_E], value: str | None) -> _E | None:
    return None if value is None else kind(value)


# -- runs -----------------------------------------------------------------------------


def run_values(run: RunRecord) -> dict[str, Any]:
    """Every column of ``runs`` for ``run``, in :data:`RUN_COLUMNS` order."""
    values = {"id": run.id, "state": str(run.state), "updated_at": to_utc(run.updated_at)}
    fields = {name: getattr(run, name) for name in _CHANGEABLE}
    if run.ended_because is None:
        fields = with_ended_because(fields)
    for name, value in fields.items():
        values.update(_run_field(name, value))
    return {column: values[column] for column in RUN_COLUMNS}


def with_ended_because(changes: Mapping[str, Any]) -> dict[str, Any]:
    """``changes`` with the ``ended_because`` of the ``result`` they write (None for no
    result), unless they name it themselves: the column always agrees with the result."""
    found = dict(changes)
    if "result" in found and "ended_because" not in found:
        result = found["result"]
        reason = result.get("ended_because") if result is not None else None
        found["ended_because"] = None if reason is None else EndedBecause(reason)
    return found


def run_changes(changes: Mapping[str, Any], *, caller: str = "set_state()") -> dict[str, Any]:
    """Columns for the :class:`RunRecord` fields in ``changes`` (``set_state``'s extras).

    Raises TypeError for a name that is not a changeable field (``id``, ``state``,
    ``updated_at`` or unknown), and ValueError for a naive datetime.
    """
    columns: dict[str, Any] = {}
    for name in changes:
        if name not in _CHANGEABLE:
            raise TypeError(f"{caller} cannot change RunRecord field {name!r}")
    for name, value in with_ended_because(changes).items():
        columns.update(_run_field(name, value))
    return columns


@dataclass(frozen=True, slots=True)
class StateChange:
    """``set_state``'s arguments, checked and encoded; each adapter writes its own SQL."""

    new: RunState
    expected: tuple[str, ...]
    """The states that may be replaced (sorted); none: the write matches nothing."""
    fields: dict[str, Any]
    """The other :class:`RunRecord` fields written, by name (``ended_because`` added)."""
    columns: dict[str, Any]
    """Column -> new value: ``state`` and the other fields, encoded."""


def state_change(
    new: RunState, *, expected: Collection[RunState], changes: Mapping[str, Any]
) -> StateChange:
    """Check ``set_state``'s arguments and encode them: TypeError for a field it cannot
    change, :class:`~agent_core.values.errors.IllegalTransition` for a move from one of
    ``expected`` to ``new`` that the table of legal moves forbids, raised before the
    store is touched."""
    columns = run_changes(changes) | {"state": str(new)}
    check_moves(expected, new)
    wanted = tuple(sorted({str(s) for s in expected}))
    return StateChange(new, wanted, with_ended_because(changes), columns)


def run_updates(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Columns for ``update_run``: :func:`run_changes`, with a pointed word for ``state``."""
    if "state" in changes:
        raise TypeError(
            "update_run() cannot change a run's state: use set_state(), whose "
            "compare-and-set keeps two writers from both moving it"
        )
    return run_changes(changes, caller="update_run()")


def _run_field(name: str, value: Any) -> dict[str, Any]:
    if name == "thread":
        thread: ThreadKey = value
        return {"team": thread.team, "channel": thread.channel, "thread_ts": thread.thread_ts}
    if name in {"lease_expires_at", "created_at", "final_posted_at", "resume_at"}:
        return {name: _opt_time(value)}
    if name == "result":
        return {name: _opt_dump(value)}
    if name in {"outcome", "stop_reason", "exit_code", "ended_because", "resume"}:
        return {name: _opt_str(value)}
    return {name: value}


def run_from_row(row: Row) -> RunRecord:
    outcome = row["outcome"]
    stop_reason = row["stop_reason"]
    exit_code = row["exit_code"]
    result = row["result"]
    return RunRecord(
        id=row["id"],
        thread=ThreadKey(row["team"], row["channel"], row["thread_ts"]),
        requester=row["requester"],
        task=row["task"],
        state=RunState(row["state"]),
        parent_id=row["parent_id"],
        owner=row["owner"],
        lease_expires_at=from_db_time(row["lease_expires_at"]),
        status_ts=row["status_ts"],
        # Older rows may hold legacy outcome words (``done``...); they are read normalised.
        outcome=None if outcome is None else normalize_outcome(outcome),
        stop_reason=None if stop_reason is None else StopReason(stop_reason),
        exit_code=None if exit_code is None else ExitCode(exit_code),
        stopped_by=row["stopped_by"],
        result=None if result is None else json.loads(result),
        created_at=_time(row["created_at"]),
        updated_at=_time(row["updated_at"]),
        final_posted_at=from_db_time(row["final_posted_at"]),
        ended_because=_opt_enum(EndedBecause, row["ended_because"]),
        continued_from=row["continued_from"],
        auto_resumes=int(row["auto_resumes"]),
        resume=_opt_enum(ResumeState, row["resume"]),
        resume_at=from_db_time(row["resume_at"]),
        resume_reason=row["resume_reason"],
        resume_by=row["resume_by"],
        trace_context=row["trace_context"],
        enterprise_id=row["enterprise_id"],
    )


@dataclass(frozen=True, slots=True)
class RunQuery:
    """``find_runs``' filters, checked and encoded; each adapter writes its own SQL."""

    states: tuple[str, ...] | None
    """State values to match, sorted (None: any state)."""
    equal: dict[str, Any]
    """Column -> the value it must equal."""
    final_posted: bool | None
    top_level: bool | None
    """True: ``parent_id`` must be NULL; False: it must be set."""
    limit: int

    @property
    def matches_nothing(self) -> bool:
        return self.limit == 0 or self.states == ()


def run_query(
    *,
    states: Collection[RunState] | None,
    stop_reason: StopReason | None,
    exit_code: ExitCode | None,
    final_posted: bool | None,
    thread: ThreadKey | None,
    owner: str | None,
    top_level: bool | None,
    limit: int,
) -> RunQuery:
    """Check ``find_runs``' arguments (ValueError for a negative ``limit``) and encode them."""
    if limit < 0:
        raise ValueError(f"find_runs() limit must be 0 or more, not {limit}")
    equal: dict[str, Any] = {}
    if stop_reason is not None:
        equal["stop_reason"] = str(stop_reason)
    if exit_code is not None:
        equal["exit_code"] = str(exit_code)
    if thread is not None:
        equal |= _run_field("thread", thread)
    if owner is not None:
        equal["owner"] = owner
    wanted = None if states is None else tuple(sorted({str(s) for s in states}))
    return RunQuery(wanted, equal, final_posted, top_level, limit)


# -- resumes --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResumeChange:
    """``set_resume``'s arguments, checked and encoded; each adapter writes its own SQL."""

    columns: dict[str, Any]
    """Column -> new value: ``resume``, ``state`` if it moves, and the other changes."""
    expected: tuple[str, ...]
    """The ``resume`` values that may be replaced (sorted), NULL aside."""
    undecided: bool
    """NULL (not decided yet) may be replaced too."""
    due_by: datetime | None
    claimed_by: str | None
    states: tuple[str, ...]
    """The ended states the run may be in (sorted): those from which ``state``, when it
    moves, is a legal move."""

    @property
    def matches_nothing(self) -> bool:
        return not self.expected and not self.undecided


def resume_change(
    new: ResumeState | None,
    *,
    expected: Collection[ResumeState | None],
    due_by: datetime | None,
    claimed_by: str | None,
    state: RunState | None,
    changes: Mapping[str, Any],
) -> ResumeChange:
    """Check ``set_resume``'s arguments (TypeError as ``set_state``'s) and encode them.

    A ``state`` move matches only the ended runs that may make it (a ``finished`` run
    never moves); :class:`~agent_core.values.errors.IllegalTransition` if none may.
    """
    columns = run_changes(changes, caller="set_resume()")
    columns["resume"] = _opt_str(new)
    states = TERMINAL_STATES
    if state is not None:
        columns["state"] = str(state)
        states = sources(state, TERMINAL_STATES)
        check_moves(states or TERMINAL_STATES, state)
    wanted = tuple(sorted({str(e) for e in expected if e is not None}))
    return ResumeChange(
        columns,
        wanted,
        None in expected,
        None if due_by is None else to_utc(due_by),
        claimed_by,
        tuple(sorted(str(s) for s in states)),
    )


# -- stop requests, checkpoints, events -------------------------------------------------


def new_stop_request(
    run_id: str, thread: ThreadKey, kind: StopReason, requested_by: str, request_id: str | None
) -> StopRequestRecord:
    """The record ``add_stop_request`` and ``add_stop_request_once`` commit: ``requested``
    now, with ``request_id`` or a new id."""
    return StopRequestRecord(
        id=request_id or uuid.uuid4().hex,
        run_id=run_id,
        thread=thread,
        kind=kind,
        requested_by=requested_by,
    )


def stop_values(record: StopRequestRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "run_id": record.run_id,
        "team": record.thread.team,
        "channel": record.thread.channel,
        "thread_ts": record.thread.thread_ts,
        "kind": str(record.kind),
        "requested_by": record.requested_by,
        "status": record.status,
        "requested_at": to_utc(record.requested_at),
        "handled_at": _opt_time(record.handled_at),
    }


def stop_batch(
    requests: Sequence[StopRequestRecord], events: Sequence[AuditEvent]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of :meth:`~agent_core.ports.StopRequestStore.add_stop_requests`: each
    request's, and each event's; ValueError (before the store is touched) if two requests
    name one run, or one is not a new ``requested`` one."""
    runs = [r.run_id for r in requests]
    if len(set(runs)) != len(runs):
        raise ValueError("a batch of stop requests names a run twice")
    if any(r.status != "requested" or r.handled_at is not None for r in requests):
        raise ValueError("a batch of stop requests holds one that is not new")
    return [stop_values(r) for r in requests], [event_values(e) for e in events]


STOPPABLE: tuple[str, ...] = tuple(sorted(LIVE_STATES - {RunState.STOPPING}))
"""The states a batch's request is added in (not ``stopping``: a Stop there escalates)."""


def stop_from_row(row: Row) -> StopRequestRecord:
    return StopRequestRecord(
        id=row["id"],
        run_id=row["run_id"],
        thread=ThreadKey(row["team"], row["channel"], row["thread_ts"]),
        kind=StopReason(row["kind"]),
        requested_by=row["requested_by"],
        status=row["status"],
        requested_at=_time(row["requested_at"]),
        handled_at=from_db_time(row["handled_at"]),
    )


def guidance_values(record: GuidanceRecord) -> dict[str, Any]:
    """The columns of a guidance to add; ValueError unless it is still queued."""
    if record.status is not GuidanceStatus.QUEUED or record.settled_at is not None:
        raise ValueError(
            f"guidance {record.id} is added queued and unsettled, not {record.status.value}"
        )
    return {
        "id": record.id,
        "run_id": record.run_id,
        "team": record.thread.team,
        "channel": record.thread.channel,
        "thread_ts": record.thread.thread_ts,
        "author": record.author,
        "text": record.text,
        "message_ts": record.message_ts,
        "status": str(record.status),
        "queued_at": to_utc(record.queued_at),
        "settled_at": None,
    }


def guidance_settled(status: GuidanceStatus) -> str:
    """The status value ``mark_guidance`` writes; ValueError for ``queued``."""
    if status is GuidanceStatus.QUEUED:
        raise ValueError("guidance is marked delivered or undelivered, never queued again")
    return str(status)


def guidance_from_row(row: Row) -> GuidanceRecord:
    return GuidanceRecord(
        id=row["id"],
        run_id=row["run_id"],
        thread=ThreadKey(row["team"], row["channel"], row["thread_ts"]),
        author=row["author"],
        text=row["text"],
        message_ts=row["message_ts"],
        status=GuidanceStatus(row["status"]),
        queued_at=_time(row["queued_at"]),
        settled_at=from_db_time(row["settled_at"]),
    )


def approval_values(record: ApprovalRecord) -> dict[str, Any]:
    """The columns of an approval to add; ValueError unless it is still requested."""
    if record.status is not ApprovalStatus.REQUESTED or record.decided_at is not None:
        raise ValueError(
            f"approval {record.id} is added requested and undecided, not {record.status.value}"
        )
    return {
        "id": record.id,
        "run_id": record.run_id,
        "team": record.thread.team,
        "channel": record.thread.channel,
        "thread_ts": record.thread.thread_ts,
        "requester": record.requester,
        "tool": record.tool,
        "arguments": record.arguments,
        "call_id": record.call_id,
        "status": str(record.status),
        "decided_by": None,
        "message_ts": record.message_ts,
        "requested_at": to_utc(record.requested_at),
        "decided_at": None,
        "taken_at": None,
    }


def approval_decided(status: ApprovalStatus) -> str:
    """The status value ``decide_approval`` writes; ValueError for ``requested``."""
    if not status.terminal:
        raise ValueError("an approval is decided approved, denied, expired or cancelled")
    return str(status)


def approval_from_row(row: Row) -> ApprovalRecord:
    return ApprovalRecord(
        id=row["id"],
        run_id=row["run_id"],
        thread=ThreadKey(row["team"], row["channel"], row["thread_ts"]),
        requester=row["requester"],
        tool=row["tool"],
        arguments=row["arguments"],
        call_id=row["call_id"],
        status=ApprovalStatus(row["status"]),
        decided_by=row["decided_by"],
        message_ts=row["message_ts"],
        requested_at=_time(row["requested_at"]),
        decided_at=from_db_time(row["decided_at"]),
        taken_at=from_db_time(row["taken_at"]),
    )


def checkpoint_values(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        "run_id": checkpoint.run_id,
        "turn": checkpoint.turn,
        "messages": _dump(list(checkpoint.messages)),
        "created_at": to_utc(checkpoint.created_at),
        "started": _dump(list(checkpoint.started)),
        "spent": None if checkpoint.spent is None else _dump(checkpoint.spent.to_dict()),
    }


def checkpoint_from_row(row: Row) -> Checkpoint:
    return Checkpoint(
        run_id=row["run_id"],
        turn=row["turn"],
        messages=tuple(json.loads(row["messages"])),
        created_at=_time(row["created_at"]),
        # NULL in rows written before r0010 (or by a worker still on older code).
        started=tuple(json.loads(row["started"] or "[]")),
        spent=None if row["spent"] is None else Spent.from_dict(json.loads(row["spent"])),
    )


def event_values(event: AuditEvent) -> dict[str, Any]:
    return {
        "run_id": event.run_id,
        "kind": event.kind,
        "actor": event.actor,
        "at": to_utc(event.at),
        "detail": _dump(dict(event.detail)),
    }


def event_from_row(row: Row) -> AuditEvent:
    return AuditEvent(
        run_id=row["run_id"],
        kind=row["kind"],
        actor=row["actor"],
        at=_time(row["at"]),
        detail=json.loads(row["detail"]),
    )
