"""threadpilot's agent core: a framework-free LLM agent loop with Stop, Abort and Shutdown.

The names below are the core's API, each documented. Ports, records and adapters
(``agent_core.ports``, ``agent_core.values.records``, ``agent_core.stores.*``; the model APIs'
adapters, built by :func:`build_model` from ``MODEL_API``) are imported from their
modules; no module whose name starts with an underscore is imported from outside the
core (tests/agent_core/test_public_api.py holds both to it).
"""

from agent_core.models.api import HTTPChatModel, ModelAPI, build_model
from agent_core.models.openai_chat import OpenAIChatModel
from agent_core.models.retry import RetryPolicy
from agent_core.ports import Approvals, ApprovalStore, ChatModel, RunStore, StopRequestStore
from agent_core.process.isolation import make_undumpable, warn_if_root
from agent_core.process.logs import configure_logging
from agent_core.process.tracing import configure_tracing, flush_traces, record_elsewhere
from agent_core.run.agent import Agent
from agent_core.run.compaction import (
    Compacted,
    Compaction,
    CompactionFailed,
    CompactionOutcome,
    CompactionStopped,
    continue_from,
    window_from_error,
)
from agent_core.run.config import AgentConfig
from agent_core.run.loop import Run, current_run
from agent_core.tools.arguments import ArgumentsError, parse_arguments, shown_arguments
from agent_core.tools.builtin import BUILTIN_TOOLS
from agent_core.tools.progress import report_progress
from agent_core.tools.toolbox import Tool, ToolError, remote_tool, tool
from agent_core.values.approvals import (
    DEFAULT_APPROVAL_TIMEOUT_S,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRule,
    parse_approval_timeout,
)
from agent_core.values.budget import (
    Budget,
    BudgetKind,
    BudgetLimits,
    Exhaustion,
    Prices,
    Spent,
)
from agent_core.values.budget_settings import OFF_WHEN_EMPTY as BUDGETS_OFF_WHEN_EMPTY
from agent_core.values.budget_settings import SETTINGS as BUDGET_SETTINGS
from agent_core.values.budget_settings import RunLimits, limits_from_settings
from agent_core.values.chat import ChatMessage, Usage
from agent_core.values.counting import count
from agent_core.values.ended import Clues, EndedBecause, classify
from agent_core.values.errors import (
    ConfigError,
    ContextOverflow,
    FatalModelError,
    IllegalTransition,
    ModelError,
    RateLimited,
    RetryableModelError,
    StorageError,
    ThreadpilotError,
    UnknownOutcome,
)
from agent_core.values.events import (
    ApprovalDecided,
    ApprovalRequested,
    ChildFinished,
    ChildStarted,
    EventHub,
    GuidanceDelivered,
    Retrying,
    RunEvent,
    RunFinished,
    StepRestarted,
    StopHonoured,
    StopRequested,
    TextDelta,
    ToolFinished,
    ToolProgress,
    ToolStarted,
    TurnFinished,
    TurnStarted,
)
from agent_core.values.guidance import Guidance, GuidanceInbox
from agent_core.values.outcomes import (
    ExitCode,
    Handoff,
    Outcome,
    RunResult,
    Timings,
    ended_by_person,
    exit_code_of,
    normalize_outcome,
    outcome_label,
    strip_softeners,
)
from agent_core.values.records import (
    Admission,
    ApprovalRecord,
    ApprovalStatus,
    AuditEvent,
    Checkpoint,
    GuidanceRecord,
    GuidanceStatus,
    RunRecord,
    StopRequestRecord,
    ThreadKey,
)
from agent_core.values.resume_policy import (
    DontResume,
    ResumeAt,
    ResumeDecision,
    ResumeNow,
    ResumeSettings,
    decide_resume,
    parse_auto_resume,
    parse_max_auto_resumes,
    parse_user_exit_grace,
    weighs_last_stop,
)
from agent_core.values.states import LIVE_STATES, TERMINAL_STATES, RunState, transition
from agent_core.values.stop import RunControl, StopReason, StopRequest, StopSource, strongest

__all__ = [
    "BUDGETS_OFF_WHEN_EMPTY",
    "BUDGET_SETTINGS",
    "BUILTIN_TOOLS",
    "DEFAULT_APPROVAL_TIMEOUT_S",
    "LIVE_STATES",
    "TERMINAL_STATES",
    "Admission",
    "Agent",
    "AgentConfig",
    "ApprovalDecided",
    "ApprovalDecision",
    "ApprovalRecord",
    "ApprovalRequest",
    "ApprovalRequested",
    "ApprovalRule",
    "ApprovalStatus",
    "ApprovalStore",
    "Approvals",
    "ArgumentsError",
    "AuditEvent",
    "Budget",
    "BudgetKind",
    "BudgetLimits",
    "ChatMessage",
    "ChatModel",
    "Checkpoint",
    "ChildFinished",
    "ChildStarted",
    "Clues",
    "Compacted",
    "Compaction",
    "CompactionFailed",
    "CompactionOutcome",
    "CompactionStopped",
    "ConfigError",
    "ContextOverflow",
    "DontResume",
    "EndedBecause",
    "EventHub",
    "Exhaustion",
    "ExitCode",
    "FatalModelError",
    "Guidance",
    "GuidanceDelivered",
    "GuidanceInbox",
    "GuidanceRecord",
    "GuidanceStatus",
    "HTTPChatModel",
    "Handoff",
    "IllegalTransition",
    "ModelAPI",
    "ModelError",
    "OpenAIChatModel",
    "Outcome",
    "Prices",
    "RateLimited",
    "ResumeAt",
    "ResumeDecision",
    "ResumeNow",
    "ResumeSettings",
    "RetryPolicy",
    "RetryableModelError",
    "Retrying",
    "Run",
    "RunControl",
    "RunEvent",
    "RunFinished",
    "RunLimits",
    "RunRecord",
    "RunResult",
    "RunState",
    "RunStore",
    "Spent",
    "StepRestarted",
    "StopHonoured",
    "StopReason",
    "StopRequest",
    "StopRequestRecord",
    "StopRequestStore",
    "StopRequested",
    "StopSource",
    "StorageError",
    "TextDelta",
    "ThreadKey",
    "ThreadpilotError",
    "Timings",
    "Tool",
    "ToolError",
    "ToolFinished",
    "ToolProgress",
    "ToolStarted",
    "TurnFinished",
    "TurnStarted",
    "UnknownOutcome",
    "Usage",
    "build_model",
    "classify",
    "configure_logging",
    "configure_tracing",
    "continue_from",
    "count",
    "current_run",
    "decide_resume",
    "ended_by_person",
    "exit_code_of",
    "flush_traces",
    "limits_from_settings",
    "make_undumpable",
    "normalize_outcome",
    "outcome_label",
    "parse_approval_timeout",
    "parse_arguments",
    "parse_auto_resume",
    "parse_max_auto_resumes",
    "parse_user_exit_grace",
    "record_elsewhere",
    "remote_tool",
    "report_progress",
    "shown_arguments",
    "strip_softeners",
    "strongest",
    "tool",
    "transition",
    "warn_if_root",
    "weighs_last_stop",
    "window_from_error",
]
