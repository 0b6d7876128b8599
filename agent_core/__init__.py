"""threadpilot's agent core: a framework-free LLM agent loop with Stop, Abort and Shutdown.

The Slack app imports the core only through the names below. Adapters for the ports
(``agent_core.stores.*``, :class:`OpenAIChatModel`) are imported from their modules.
"""

from agent_core.agent import Agent, AgentConfig
from agent_core.builtin_tools import BUILTIN_TOOLS
from agent_core.errors import (
    ConfigError,
    ContextOverflow,
    FatalModelError,
    IllegalTransition,
    ModelError,
    RateLimited,
    RetryableModelError,
    RunNotFound,
    StopNotAllowed,
    StorageError,
    ThreadpilotError,
    UnknownOutcome,
)
from agent_core.events import (
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
from agent_core.guidance import Guidance, GuidanceInbox
from agent_core.logs import configure_logging
from agent_core.loop import Run, current_run
from agent_core.model import OpenAIChatModel
from agent_core.outcomes import (
    ExitCode,
    Handoff,
    Outcome,
    RunResult,
    Timings,
    Usage,
    normalize_outcome,
    outcome_label,
    strip_softeners,
)
from agent_core.ports import (
    AuditEvent,
    ChatMessage,
    ChatModel,
    Checkpoint,
    GuidanceRecord,
    GuidanceStatus,
    RunRecord,
    RunStore,
    StopRequestRecord,
    StopRequestStore,
    ThreadKey,
)
from agent_core.retry import RetryPolicy
from agent_core.states import LIVE_STATES, TERMINAL_STATES, RunState, transition
from agent_core.stop import RunControl, StopReason, StopRequest
from agent_core.tool_progress import report_progress
from agent_core.tools import Tool, ToolError, remote_tool, tool

__all__ = [
    "BUILTIN_TOOLS",
    "LIVE_STATES",
    "TERMINAL_STATES",
    "Agent",
    "AgentConfig",
    "AuditEvent",
    "ChatMessage",
    "ChatModel",
    "Checkpoint",
    "ConfigError",
    "ContextOverflow",
    "EventHub",
    "ExitCode",
    "FatalModelError",
    "Guidance",
    "GuidanceDelivered",
    "GuidanceInbox",
    "GuidanceRecord",
    "GuidanceStatus",
    "Handoff",
    "IllegalTransition",
    "ModelError",
    "OpenAIChatModel",
    "Outcome",
    "RateLimited",
    "RetryPolicy",
    "RetryableModelError",
    "Retrying",
    "Run",
    "RunControl",
    "RunEvent",
    "RunFinished",
    "RunNotFound",
    "RunRecord",
    "RunResult",
    "RunState",
    "RunStore",
    "StepRestarted",
    "StopHonoured",
    "StopNotAllowed",
    "StopReason",
    "StopRequest",
    "StopRequestRecord",
    "StopRequestStore",
    "StopRequested",
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
    "configure_logging",
    "current_run",
    "normalize_outcome",
    "outcome_label",
    "remote_tool",
    "report_progress",
    "strip_softeners",
    "tool",
    "transition",
]
