"""The Slack app's settings, from the environment or ``.env`` (docs/operations.md).

Every setting is listed, with its meaning, in ``.env.example``. A missing or malformed
one stops start-up with a single line that names it (:func:`load_settings`); a name that
is not a setting is reported with the nearest one (:mod:`bot.config.unknown_settings`).

Light on purpose: ``python -m bot`` reads the settings before it imports the rest of the
app, so a settings mistake is reported at once. What only one check needs (the MCP
config reader) is imported where it is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import (
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from agent_core import (
    BUDGET_SETTINGS,
    DEFAULT_APPROVAL_TIMEOUT_S,
    EndedBecause,
    ResumeSettings,
    RunLimits,
    limits_from_settings,
    parse_approval_timeout,
    parse_auto_resume,
    parse_max_auto_resumes,
    parse_user_exit_grace,
)
from agent_core.models.api import ModelAPI
from agent_core.models.http_exchange import DEFAULT_REPLY_TIMEOUT_S
from agent_core.process.settings_file import (
    ENV_FILE,
    REQUIRED_WITH_API,
    SettingsInvalid,
    raise_all,
    settings_text,
)
from agent_core.stores.defaults import ANSWERING_POOL_SIZE, MIGRATION_TIMEOUT_S, POOL_SIZE
from agent_core.stores.factory import parse_database_url
from agent_core.values.errors import ConfigError
from bot.config.problems import (
    MISSING_FOR_API,
    MISSING_FOR_OAUTH,
    NO_TRANSPORT,
    ONE_MODE_ONLY,
    placeholder,
    problems_of,
)
from bot.observe.loop_load import BUSY_LAG_S

if TYPE_CHECKING:
    from collections.abc import Callable

    # Only a private attribute's annotation, which pydantic does not resolve: importing
    # it for real would load the MCP SDK before the settings are read.
    from agent_core.tools.mcp import ServerConfig  # noqa: TC004

__all__ = [
    "DEPRECATED_SETTINGS",
    "ENV_FILE",
    "HistoryLimit",
    "ModelEndpointSettings",
    "Settings",
    "SettingsInvalid",
    "StopPolicy",
    "default_history_limit",
    "load_settings",
]

_T = TypeVar("_T")

DEPRECATED_SETTINGS = {
    "AUTO_RESUME_ON_RESTART": "AUTO_RESUME (take shutdown and worker_lost out of it)",
}
"""Settings still read but replaced, each with what replaced it: start-up warns when one
is set (``settings.deprecated``), and ``.env.example`` no longer lists them."""


class StopPolicy(StrEnum):
    """Who may press Stop or Abort on a run (admins always may)."""

    REQUESTER = "requester"
    """Only the person who started the run."""
    PARTICIPANTS = "participants"
    """Anyone who has written in the run's thread."""
    ANYONE = "anyone"


class HistoryLimit(StrEnum):
    """How often Slack lets the app read a thread (``conversations.replies``)."""

    TIER3 = "tier3"
    """An internal, customer-built app: about 50 calls a minute, 1,000 messages each."""
    DISTRIBUTED = "distributed"
    """A commercially distributed app not in the Slack Marketplace: one call a minute
    per workspace, at most 15 messages."""


def default_history_limit(settings: Settings) -> HistoryLimit:
    """``SLACK_HISTORY_LIMIT`` when it is not set: ``tier3`` with a bot token (an app
    built for its own workspace), ``distributed`` in OAuth mode (an app distributed
    outside the Marketplace is held to it by Slack)."""
    return HistoryLimit.DISTRIBUTED if settings.oauth_mode else HistoryLimit.TIER3


@dataclass(frozen=True, slots=True)
class ModelEndpointSettings:
    """What the adapter of ``MODEL_API`` is built from."""

    api: ModelAPI
    api_key: str
    model: str
    base_url: str | None


class _SettingsText(PydanticBaseSettingsSource):
    """The environment over ``.env``, as :func:`agent_core.process.settings_file.settings_text`
    reads them for the app and the terminal alike: an empty variable of the environment
    hides the file's line and means the default (an empty budget: off)."""

    def __init__(self, settings_cls: type[BaseSettings], env_file: Any) -> None:
        super().__init__(settings_cls)
        self._env_file = env_file

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # everything is read in __call__

    def __call__(self) -> dict[str, Any]:
        fields = self.settings_cls.model_fields
        return {n: v for n, v in settings_text(self._env_file).items() if n in fields}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_file=ENV_FILE,
        env_file_encoding="utf-8",
        extra="ignore",
        case_sensitive=True,
    )

    # -- OAuth mode (many workspaces); declared before SLACK_BOT_TOKEN, which reads them --
    SLACK_CLIENT_ID: str | None = Field(
        default=None, description="The app's Client ID: turns OAuth mode on (many workspaces)."
    )
    SLACK_CLIENT_SECRET: str | None = Field(
        default=None, validate_default=True, description="The app's Client Secret (OAuth mode)."
    )
    SLACK_REDIRECT_URI: str | None = Field(
        default=None, description="Public address of /slack/oauth_redirect (OAuth mode)."
    )
    SLACK_TOKEN_KEY: str | None = Field(
        default=None,
        description="Fernet key(s), comma-separated, newest first: installations' tokens "
        "are encrypted at rest with the first.",
    )
    SLACK_BOT_TOKEN: str | None = Field(
        default=None, validate_default=True, description="Bot token, xoxb-..."
    )
    SLACK_SIGNING_SECRET: str | None = Field(
        default=None, description="Verifies HTTP requests; not needed with Socket Mode."
    )
    SLACK_APP_TOKEN: str | None = Field(
        default=None,
        validate_default=True,  # to say it is missing when the signing secret is too
        description="App-level token (xapp-...) with connections:write: turns Socket Mode on.",
    )
    SLACK_API_URL: str = "https://slack.com/api/"
    # -- the model API (MODEL_API picks the adapter; its key and model are required) --
    MODEL_API: ModelAPI = Field(
        default=ModelAPI.OPENAI_CHAT,
        description="openai-chat (Chat Completions), openai-responses or anthropic.",
    )
    ANTHROPIC_API_KEY: str | None = Field(default=None, validate_default=True)
    ANTHROPIC_BASE_URL: str | None = None
    ANTHROPIC_MODEL: str | None = Field(default=None, validate_default=True)
    MODEL_REPLY_TIMEOUT: float = Field(
        default=DEFAULT_REPLY_TIMEOUT_S,
        gt=0,
        description="Seconds one model reply may take, however its stream keeps busy.",
    )
    OPENAI_API_KEY: str | None = Field(default=None, validate_default=True)
    OPENAI_BASE_URL: str | None = None
    OPENAI_MODEL: str | None = Field(default=None, validate_default=True)
    DATABASE_URL: str = "sqlite:///./threadpilot.db"
    PORT: int = Field(default=3000, ge=1, le=65535)
    METRICS_PORT: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="A listener of its own for GET /metrics, /healthz and /readyz, on "
        "METRICS_HOST; PORT then serves no /metrics. Empty: all on PORT.",
    )
    METRICS_HOST: str = Field(
        default="127.0.0.1", description="The address METRICS_PORT listens on."
    )
    STOP_POLICY: StopPolicy = StopPolicy.REQUESTER
    APPROVAL_POLICY: StopPolicy = Field(
        default=StopPolicy.REQUESTER,
        description="Who may approve or deny a tool call held for approval (admins always): "
        "requester, participants or anyone.",
    )
    APPROVAL_TIMEOUT: float = Field(
        default=DEFAULT_APPROVAL_TIMEOUT_S,
        description="90s|10m|1h; default 1h. A held call nobody decided is denied as expired.",
    )
    ADMIN_USER_IDS: Annotated[frozenset[str], NoDecode] = frozenset()
    ALLOW_EXTERNAL_USERS: bool = Field(
        default=False,
        description="true: people from other organisations (Slack Connect) may use the app.",
    )
    ALLOW_GUESTS: bool = Field(
        default=False, description="true: the workspace's guests may use the app."
    )
    SLACK_HISTORY_LIMIT: HistoryLimit | None = Field(
        default=None,
        description="tier3|distributed: how often Slack lets the app read a thread "
        "(distributed: one conversations.replies a minute per workspace, 15 messages).",
    )
    LOG_FORMAT: Literal["console", "json"] = "console"
    LOG_LEVEL: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    MAX_TURNS: int = Field(default=20, ge=1)
    FINAL_TURN_TIMEOUT: float | None = Field(default=None, gt=0)
    TOOL_TIMEOUT: float = Field(default=120.0, gt=0)
    MAX_RETRY_AFTER: float = Field(
        default=120.0,
        ge=0,
        description="The longest Retry-After a run waits out in place; a longer one ends it "
        "blocked, to resume after it (AUTO_RESUME).",
    )
    MCP_CONFIG: str | None = Field(
        default=None,
        description='A JSON file listing MCP servers ({"mcpServers": {...}}): their tools.',
    )
    GUIDANCE_MAX_CHARS: int = Field(default=4000, ge=1)
    AUTO_RESUME: Annotated[frozenset[EndedBecause], NoDecode] = Field(
        default=ResumeSettings().auto_resume,
        description="Why a run may have ended for it to resume on its own (docs/stopping.md).",
    )
    MAX_AUTO_RESUMES: int = Field(default=ResumeSettings().max_auto_resumes, ge=0)
    USER_EXIT_GRACE: timedelta = ResumeSettings().user_exit_grace
    AUTO_RESUME_ON_RESTART: bool = Field(
        default=True,
        description="Deprecated alias: false takes shutdown and worker_lost out of AUTO_RESUME.",
    )
    DATABASE_POOL_SIZE: int = Field(
        default=POOL_SIZE,
        ge=1,
        le=100,
        description="PostgreSQL connections one worker opens for its runs' work (clicks have "
        f"{ANSWERING_POOL_SIZE} more of their own).",
    )
    RETENTION_DAYS: int = Field(default=30, ge=1)
    MIGRATION_TIMEOUT: float = Field(default=MIGRATION_TIMEOUT_S, gt=0)
    LEASE_TTL: float = Field(default=30.0, ge=3.0)
    MAX_LIVE_RUNS: int = Field(
        default=200,
        ge=1,
        description="Runs one worker process drives at once; more wait in the durable queue.",
    )
    MAX_RUNS_PER_USER: int = Field(
        default=3,
        ge=0,
        description="Runs one person may have live or queued per workspace, on all workers "
        "together; past it a mention is refused with a note. 0 turns this off.",
    )
    BUSY_LOOP_LAG_MS: float = Field(
        default=BUSY_LAG_S * 1000,
        ge=0,
        description="A worker whose event loop runs this late on average (ms) takes no new "
        "runs until it is calm again; 0 turns this off.",
    )
    STOP_POLL_INTERVAL: float = Field(default=0.25, gt=0, le=10)
    WORKER_ID: str | None = None
    # -- budgets: the text as written, read by the core's one parser (budget_settings.py)
    RUN_TOKEN_BUDGET: str | None = Field(
        default=None, description="Default 1000000; 0 or empty: off."
    )
    RUN_TOOL_CALL_BUDGET: str | None = Field(
        default=None, description="Default 200; 0 or empty: off."
    )
    RUN_TIME_BUDGET: str | None = Field(
        default=None, description="90s|10m|1h; default 30m; 0 or empty: off."
    )
    RUN_COST_BUDGET: str | None = Field(default=None, description="USD; needs both prices.")
    MODEL_PRICE_INPUT: str | None = Field(default=None, description="USD per 1M prompt tokens.")
    MODEL_PRICE_OUTPUT: str | None = Field(default=None, description="USD per 1M output tokens.")
    MAX_TOOL_CALLS_PER_STEP: str | None = Field(default=None, description="Default 16.")
    MAX_CHILDREN_PER_RUN: str | None = Field(default=None, description="Default 8.")
    MODEL_MAX_OUTPUT_TOKENS: str | None = None
    MODEL_CONTEXT_WINDOW: str | None = None

    _mcp_servers: tuple[ServerConfig, ...] = PrivateAttr(default=())
    _run_limits: RunLimits = PrivateAttr(default_factory=RunLimits)

    @field_validator("SLACK_BOT_TOKEN")
    @classmethod
    def _bot_token(cls, value: str | None, info: ValidationInfo) -> str | None:
        oauth = info.data.get("SLACK_CLIENT_ID") is not None
        if oauth and (value is None or placeholder(value, "xoxb-")):
            return None  # .env.example's empty "xoxb-" is no second mode
        if value is None:
            raise PydanticCustomError("missing", "Field required")
        if oauth:
            raise ValueError(ONE_MODE_ONLY)
        if not value.startswith("xoxb-"):
            raise ValueError("must be a bot token starting with xoxb-")
        if placeholder(value, "xoxb-"):
            raise ValueError("is a placeholder: paste the Bot User OAuth Token (xoxb-...)")
        return value

    @field_validator("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
    @classmethod
    def _api_key(cls, value: str | None) -> str | None:
        if value is not None and placeholder(value, "sk-"):
            raise ValueError("is a placeholder: set the model endpoint's API key")
        return value

    @field_validator("OPENAI_API_KEY", "OPENAI_MODEL", "ANTHROPIC_API_KEY", "ANTHROPIC_MODEL")
    @classmethod
    def _required_by_the_api(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Each API needs its own key and model; the other API's may stay unset. (MODEL_API
        # is declared first, so it is read here; when it is invalid, it says so itself.)
        api = info.data.get("MODEL_API")
        if value is None and api is not None and info.field_name in _model_settings(api):
            raise PydanticCustomError(MISSING_FOR_API, REQUIRED_WITH_API, {"api": api.value})
        return value

    @field_validator("SLACK_APP_TOKEN")
    @classmethod
    def _app_token(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value in (None, ""):
            # Declared after SLACK_SIGNING_SECRET, so it is read here: without either,
            # Slack can send the app nothing, and both are named at once (problems_of).
            if info.data.get("SLACK_SIGNING_SECRET") is None:
                raise PydanticCustomError(NO_TRANSPORT, "no transport")
            return None
        if not value.startswith("xapp-"):
            raise ValueError("must be an app-level token starting with xapp-")
        if placeholder(value, "xapp-"):
            raise ValueError("is a placeholder: paste the App-Level Token (xapp-...)")
        return value

    @field_validator("SLACK_CLIENT_SECRET")
    @classmethod
    def _client_secret(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None and info.data.get("SLACK_CLIENT_ID") is not None:
            raise PydanticCustomError(MISSING_FOR_OAUTH, "missing for OAuth")
        return value

    @field_validator("SLACK_TOKEN_KEY")
    @classmethod
    def _token_key(cls, value: str | None) -> str | None:
        if value is not None:
            from bot.config.token_key import check_keys  # cryptography comes with it

            check_keys(value)
        return value

    @field_validator("SLACK_REDIRECT_URI")
    @classmethod
    def _redirect_uri(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(
                "must be the https:// address of /slack/oauth_redirect, as listed in the "
                "app's redirect URLs"
            )
        return value

    @field_validator(
        "SLACK_CLIENT_ID",
        "SLACK_CLIENT_SECRET",
        "SLACK_REDIRECT_URI",
        "SLACK_TOKEN_KEY",
        mode="before",
    )
    @classmethod
    def _unset_when_empty(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator(
        "SLACK_SIGNING_SECRET", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "MCP_CONFIG", mode="before"
    )
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("SLACK_API_URL", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("SLACK_API_URL")
    @classmethod
    def _trailing_slash(cls, value: str) -> str:
        # slack_sdk joins the method name straight onto the base URL.
        return value if value.endswith("/") else value + "/"

    @field_validator("ADMIN_USER_IDS", mode="before")
    @classmethod
    def _user_ids(cls, value: Any) -> Any:
        if isinstance(value, str):
            return frozenset(v.strip() for v in value.split(",") if v.strip())
        return value

    @field_validator("AUTO_RESUME", mode="before")
    @classmethod
    def _auto_resume(cls, value: Any) -> Any:
        return _parsed(parse_auto_resume, value) if isinstance(value, str) else value

    @field_validator("MAX_AUTO_RESUMES", mode="before")
    @classmethod
    def _max_auto_resumes(cls, value: Any) -> Any:
        return _parsed(parse_max_auto_resumes, value) if isinstance(value, str) else value

    @field_validator("USER_EXIT_GRACE", mode="before")
    @classmethod
    def _user_exit_grace(cls, value: Any) -> Any:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return _parsed(parse_user_exit_grace, str(value))
        return value

    @field_validator("APPROVAL_TIMEOUT", mode="before")
    @classmethod
    def _approval_timeout(cls, value: Any) -> Any:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return _parsed(parse_approval_timeout, str(value))
        return value

    @field_validator("LOG_LEVEL", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("DATABASE_URL")
    @classmethod
    def _database_url(cls, value: str) -> str:
        # The store factory's own parser: every form it opens is accepted here (including
        # postgresql+asyncpg://), and what it refuses is refused with its message.
        try:
            parse_database_url(value)
        except ConfigError as exc:
            raise ValueError(exc.problem) from None
        return value

    @property
    def model_endpoint(self) -> ModelEndpointSettings:
        """The key, model and base URL of ``MODEL_API`` (None: the API's own default)."""
        key_name, model_name = _model_settings(self.MODEL_API)
        anthropic = self.MODEL_API is ModelAPI.ANTHROPIC
        base = self.ANTHROPIC_BASE_URL if anthropic else self.OPENAI_BASE_URL
        key, model = getattr(self, key_name), getattr(self, model_name)
        assert isinstance(key, str) and isinstance(model, str)  # _required_by_the_api saw to it
        return ModelEndpointSettings(self.MODEL_API, key, model, base)

    @model_validator(mode="after")
    def _metrics_port(self) -> Settings:
        if self.METRICS_PORT == self.PORT:
            raise ValueError(f"METRICS_PORT: must differ from PORT ({self.PORT})")
        return self

    @model_validator(mode="after")
    def _mcp_config(self) -> Settings:
        # Read and checked here, with the other settings: a bad file stops start-up with
        # one line naming MCP_CONFIG and the file, before anything is started.
        if self.MCP_CONFIG is not None:
            from agent_core.tools.mcp import load_mcp_config  # the MCP SDK comes with it

            try:
                self._mcp_servers = load_mcp_config(self.MCP_CONFIG)
            except ConfigError as exc:
                where = "" if self.MCP_CONFIG in exc.problem else f" (in {self.MCP_CONFIG})"
                raise ValueError(f"{exc.setting}: {exc.problem}{where}") from None
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment and .env, read as one (settings_file.py), not as two sources:
        # an empty variable must hide the file's line, not fall through to it.
        env_file = getattr(dotenv_settings, "env_file", None)
        return (init_settings, _SettingsText(settings_cls, env_file), file_secret_settings)

    @field_validator(*BUDGET_SETTINGS, mode="before")
    @classmethod
    def _budget_text(cls, value: Any) -> Any:
        # Given as a number (an override in code): the parser reads its text all the same.
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        return value

    @model_validator(mode="after")
    def _budgets(self) -> Settings:
        written = {n: v for n in BUDGET_SETTINGS if isinstance(v := getattr(self, n), str)}
        try:
            self._run_limits = limits_from_settings(written)
        except ConfigError as exc:
            raise ValueError(f"{exc.setting}: {exc.problem}") from None
        return self

    @property
    def run_limits(self) -> RunLimits:
        """The request budget and the per-step, per-run and per-reply caps."""
        return self._run_limits

    @property
    def oauth_mode(self) -> bool:
        """Installed by OAuth in any number of workspaces (``SLACK_CLIENT_ID``), rather
        than in one by ``SLACK_BOT_TOKEN``."""
        return self.SLACK_CLIENT_ID is not None

    @property
    def history_limit(self) -> HistoryLimit:
        """``SLACK_HISTORY_LIMIT``, or its default for this mode
        (:func:`default_history_limit`)."""
        return self.SLACK_HISTORY_LIMIT or default_history_limit(self)

    @property
    def socket_mode(self) -> bool:
        return self.SLACK_APP_TOKEN is not None

    @property
    def resume_settings(self) -> ResumeSettings:
        """``AUTO_RESUME``, ``MAX_AUTO_RESUMES`` and ``USER_EXIT_GRACE`` for the policy.

        ``AUTO_RESUME_ON_RESTART=false`` (the setting this one replaced, still read) takes
        ``shutdown`` and ``worker_lost`` out of ``AUTO_RESUME``.
        """
        reasons = self.AUTO_RESUME
        if not self.AUTO_RESUME_ON_RESTART:
            reasons -= {EndedBecause.SHUTDOWN, EndedBecause.WORKER_LOST}
        return ResumeSettings(reasons, self.MAX_AUTO_RESUMES, self.USER_EXIT_GRACE)

    @property
    def deprecated(self) -> dict[str, str]:
        """The :data:`DEPRECATED_SETTINGS` set here, each with what replaced it."""
        return {n: use for n, use in DEPRECATED_SETTINGS.items() if n in self.model_fields_set}

    @property
    def mcp_servers(self) -> tuple[ServerConfig, ...]:
        """The MCP servers ``MCP_CONFIG`` lists (none without it)."""
        return self._mcp_servers


def _model_settings(api: ModelAPI) -> tuple[str, str]:
    """The settings that name the key and the model of ``api``."""
    if api is ModelAPI.ANTHROPIC:
        return "ANTHROPIC_API_KEY", "ANTHROPIC_MODEL"
    return "OPENAI_API_KEY", "OPENAI_MODEL"


def _parsed(parse: Callable[[str], _T], raw: str) -> _T:
    """A setting read by the core's own parser, its ConfigError made pydantic's error."""
    try:
        return parse(raw)
    except ConfigError as exc:
        raise ValueError(exc.problem) from None


def load_settings(**overrides: Any) -> Settings:
    """Read and validate the settings; raise :class:`ConfigError` naming every bad one
    (one line each in its message; :class:`SettingsInvalid` when there are several).

    ``_env_file`` (pydantic-settings' own override) names another settings file, or
    ``None`` for none; a missing setting's line says where it was looked for."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        env_file = overrides.get("_env_file", ENV_FILE)
        problems = [p for error in exc.errors() for p in problems_of(error, env_file)]
    raise_all(problems)
    raise AssertionError("unreachable: a ValidationError names at least one problem")
