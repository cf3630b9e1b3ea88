"""Configuration: one TOML file, every value overridable by an environment variable.

The variable for a value is ``AGENTQUEUE_`` plus its path in upper case with ``__`` between
levels: ``[queue] lease_ttl_secs`` is ``AGENTQUEUE_QUEUE__LEASE_TTL_SECS`` and
``[task_types.bugfix] timeout_secs`` is ``AGENTQUEUE_TASK_TYPES__BUGFIX__TIMEOUT_SECS``.
Environment beats file; file beats defaults. Unknown keys are errors naming the key.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from .domain.errors import ConfigError, FieldProblem
from .domain.priority import DEFAULT_AGING_INTERVAL_SECS
from .domain.retry import BackoffPolicy
from .spec import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_TENANT

ENV_PREFIX = "AGENTQUEUE_"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class QueueSettings(_Section):
    """How the queue orders and leases work."""

    aging_interval_secs: float = Field(default=DEFAULT_AGING_INTERVAL_SECS, gt=0)
    lease_ttl_secs: float = Field(default=30.0, gt=0, le=3600)
    deadline_grace_secs: float = Field(default=10.0, ge=0, le=3600)
    max_payload_bytes: int = Field(default=DEFAULT_MAX_PAYLOAD_BYTES, ge=1024, le=64 * 1024 * 1024)
    default_tenant: str = DEFAULT_TENANT
    claim_batch: int = Field(default=100, ge=1, le=10_000)
    admit_on_submit: bool = True
    """Admit a task that may run at once as it is submitted, instead of at the scheduler's next
    pass (its pending -> queued step is recorded either way)."""


class RetrySettings(_Section):
    """Backoff between automatic retries: ``min(base ** n, cap_secs)``, spread by +/- jitter."""

    base: float = Field(default=2.0, ge=1.0, le=60.0)
    cap_secs: float = Field(default=30.0, gt=0, le=86_400)
    jitter: float = Field(default=0.1, ge=0.0, le=1.0)

    def policy(self) -> BackoffPolicy:
        """As the domain's BackoffPolicy."""
        return BackoffPolicy(base=self.base, cap=self.cap_secs, jitter=self.jitter)


class TaskTypeSettings(_Section):
    """Per task_type settings."""

    timeout_secs: int | None = Field(default=None, ge=1, le=7 * 86_400)


class AgentSettings(_Section):
    """A command agent (R16): a command line run as a sandboxed subprocess per attempt.

    The task arrives as JSON on stdin and in the file named by ``AGENTQUEUE_TASK_FILE``; the result
    is the JSON on the last line of stdout or in ``result.json`` in the working directory. The
    exit code decides the outcome: ``success_exit_codes`` complete, ``retryable_exit_codes`` retry,
    anything else fails.
    """

    command: list[str] = Field(min_length=1)
    task_types: list[str] = Field(min_length=1)
    max_concurrent: int = Field(default=1, ge=1, le=10_000)
    env: list[str] = Field(default_factory=list)
    timeout_secs: int | None = Field(default=None, ge=1, le=7 * 86_400)
    cpu_secs: int | None = Field(default=None, ge=1)
    memory_mb: int | None = Field(default=None, ge=16)
    open_files: int = Field(default=256, ge=16, le=1_048_576)
    max_output_bytes: int = Field(default=1024 * 1024, ge=1024, le=256 * 1024 * 1024)
    success_exit_codes: list[int] = Field(default_factory=lambda: [0])
    retryable_exit_codes: list[int] = Field(default_factory=lambda: [75])
    kill_grace_secs: float = Field(default=5.0, ge=0, le=600)
    workdir: str | None = None
    keep_workdir: bool = False

    @field_validator("env")
    @classmethod
    def _env_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return names


class WorkerSettings(_Section):
    """How workers run."""

    concurrency: int = Field(default=10, ge=1, le=10_000)
    heartbeat_secs: float | None = Field(default=None, gt=0, le=600)
    grace_secs: float = Field(default=30.0, ge=0, le=3600)
    cancel_grace_secs: float = Field(default=0.5, ge=0, le=60)
    poll_secs: float = Field(default=1.0, gt=0, le=60)
    claims_in_flight: int = Field(default=2, ge=1, le=64)
    """Claims a worker keeps under way at once (the database works on one while the worker
    handles another)."""
    flushes_in_flight: int = Field(default=2, ge=1, le=64)
    """Batches of outcomes a worker writes at once."""
    workdir: str | None = None


class Settings(BaseSettings):
    """Everything configurable. Build with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        case_sensitive=False,
    )

    db: str | None = None
    """Database URL, used when neither the caller nor AGENTQUEUE_DB names one."""
    queue: QueueSettings = Field(default_factory=QueueSettings)
    retry: RetrySettings = Field(default_factory=RetrySettings)
    task_types: dict[str, TaskTypeSettings] = Field(default_factory=dict)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    agents: dict[str, AgentSettings] = Field(default_factory=dict)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The TOML file arrives as init values; the environment overrides it.
        return (env_settings, init_settings)

    def timeouts(self) -> dict[str, int]:
        """Configured attempt timeouts by task_type."""
        return {name: t.timeout_secs for name, t in self.task_types.items() if t.timeout_secs}


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """Read the TOML file at ``path`` (if any) and the environment; raise ConfigError if bad."""
    data: dict[str, Any] = {}
    if path is not None:
        file = Path(path)
        try:
            data = tomllib.loads(file.read_text())
        except FileNotFoundError:
            raise ConfigError(f"no such file: {file}", "config") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{file} is not valid TOML: {exc}", "config") from None
        except OSError as exc:
            raise ConfigError(f"cannot read {file}: {exc.strerror}", "config") from None
    try:
        return Settings(**data)
    except ValidationError as exc:
        problems = [
            FieldProblem(
                ".".join(str(p) for p in err["loc"]),
                "unknown setting" if err["type"] == "extra_forbidden" else str(err["msg"]),
            )
            for err in exc.errors(include_url=False, include_input=False)
        ]
        raise ConfigError(problems) from None
