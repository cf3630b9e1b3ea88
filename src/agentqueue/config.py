"""Configuration: one TOML file, every value overridable by an environment variable.

The variable for a value is ``AGENTQUEUE_`` plus its path in upper case with ``__`` between
levels: ``[queue] lease_ttl_secs`` is ``AGENTQUEUE_QUEUE__LEASE_TTL_SECS`` and
``[task_types.bugfix] timeout_secs`` is ``AGENTQUEUE_TASK_TYPES__BUGFIX__TIMEOUT_SECS``.
Environment beats file; file beats defaults. Unknown keys are errors naming the key.
``AGENTQUEUE_API`` alone is not the ``[api]`` section: it names the server the CLI talks to (its
keys are ``AGENTQUEUE_API__PORT`` and so on).
"""

from __future__ import annotations

import os
import pwd
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from .domain.audit import AuditKey, Keyring
from .domain.errors import ConfigError, FieldProblem, InvalidInput
from .domain.guardrails import blow_up_problem
from .domain.limits import MAX_CONFIG_BYTES, json_problem, read_bounded, utf8_text
from .domain.priority import DEFAULT_AGING_INTERVAL_SECS
from .domain.retention import RetentionPolicy
from .domain.retry import BackoffPolicy
from .envsettings import by_field_name, deep_update, environment_values
from .prompts import PromptError, Prompts, PromptTemplate
from .prompts import check as check_prompt
from .spec import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_TENANT, check_name
from .unconfigured import PREFIX as ENV_PREFIX
from .unconfigured import TEXT_FIELD, WHOLE_EXCLUDED

M = TypeVar("M", bound=BaseModel)


class _Section(BaseModel):
    # Validators are built on first use, not at import: a command that reads no configuration
    # file and no override builds none (start-up time; see default_settings).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class QueueSettings(_Section):
    """How the queue orders and leases work."""

    aging_interval_secs: float = Field(default=DEFAULT_AGING_INTERVAL_SECS, gt=0)
    lease_ttl_secs: float = Field(default=30.0, gt=0, le=3600)
    deadline_grace_secs: float = Field(default=10.0, ge=0, le=3600)
    max_payload_bytes: int = Field(default=DEFAULT_MAX_PAYLOAD_BYTES, ge=1024, le=64 * 1024 * 1024)
    default_tenant: str = DEFAULT_TENANT
    claim_batch: int | None = Field(default=None, ge=1, le=10_000)
    """Tasks a worker claims per statement; unset: derived from its slots and the backend
    (see agentqueue.worker.tuning)."""
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
    rate_limit: str | None = None
    """The name of a ``[rate_limits.NAME]`` bucket every task of this type draws from."""
    broadcast: int = Field(default=0, ge=0, le=100)
    """Deliver each task of this type that names no assignee to at most this many capable
    agents, one task each (0, the default: never broadcast; routing picks one agent)."""


class RateLimitSettings(_Section):
    """A named token bucket (R12), kept in the database and shared by every scheduler.

    Each admission takes a token; tokens come back at ``per_minute`` a minute, and at most
    ``burst`` are saved up. With the default burst of 1, admissions are spaced evenly, so no
    60-second window ever sees more than ``per_minute`` of them; a burst of ``b`` allows up to
    ``per_minute + b - 1`` in a window.
    """

    per_minute: float = Field(gt=0, le=1_000_000)
    burst: int = Field(default=1, ge=1, le=1_000_000)


class AdmissionSettings(_Section):
    """How the scheduler admits pending work (R12)."""

    max_active: int | None = Field(default=None, ge=1, le=10_000_000)
    """A global cap on admitted work (queued plus executing); none by default."""
    fair_share: bool = True
    """Among tasks of equal rank, serve the tenant with the least admitted work (per weight)
    first, so one tenant's backlog cannot starve another."""
    tenant_weights: dict[str, float] = Field(default_factory=dict)
    """A tenant of weight 2 gets twice the share of one of weight 1 (the default)."""

    @field_validator("tenant_weights")
    @classmethod
    def _weights(cls, weights: dict[str, float]) -> dict[str, float]:
        for tenant, weight in weights.items():
            if not 0 < weight <= 1000:
                raise ValueError(f"the weight of {tenant!r} must be above 0 and at most 1000")
        return weights


class ToolSettings(_Section):
    """Waiting on tools (R9) and the tool runners of workers."""

    timeout_secs: float = Field(default=600.0, gt=0, le=7 * 86_400)
    """A tool call's timeout when the call does not give one."""
    concurrency: int = Field(default=10, ge=1, le=10_000)
    """Tool calls a worker's tool runners make at once (apart from its task slots)."""
    lease_secs: float = Field(default=60.0, gt=0, le=86_400)
    """How long a runner holds a call before another may take it (a dead runner's call)."""


class PreemptionSettings(_Section):
    """Preemption (R11): when a P0 task is queued and every slot that could run it is busy, a
    task of at least ``min_priority`` that has run for more than ``after_secs`` is asked to
    checkpoint and give its slot back (queued again, not as a retry)."""

    enabled: bool = True
    after_secs: float = Field(default=3.0, ge=0, le=86_400)
    min_priority: int = Field(default=7, ge=1, le=9)
    grace_secs: float = Field(default=5.0, ge=0, le=600)
    """How long a command agent gets after SIGUSR1 to checkpoint and exit."""


class SchedulerSettings(_Section):
    """The scheduler loop and its leadership (R21)."""

    tick_secs: float = Field(default=1.0, gt=0, le=60)
    """The regular pass; notifications wake it sooner."""
    leader_ttl_secs: float = Field(default=5.0, ge=1, le=300)
    """A leader that stops renewing is replaced this long after its last renewal."""
    renew_secs: float = Field(default=1.0, gt=0, le=60)

    @model_validator(mode="after")
    def _renew_within_ttl(self) -> SchedulerSettings:
        if self.renew_secs * 2 > self.leader_ttl_secs:
            raise ValueError("renew_secs: must be at most half of leader_ttl_secs")
        return self


class AgentSettings(_Section):
    """A command agent (R16): a command line run as a sandboxed subprocess per attempt.

    The task arrives as JSON on stdin and in the file named by ``AGENTQUEUE_TASK_FILE``; the result
    is the JSON on the last line of stdout or in ``result.json`` in the working directory. The
    exit code decides the outcome: ``success_exit_codes`` complete, ``retryable_exit_codes`` retry,
    anything else fails.
    """

    command: list[str] = Field(min_length=1)
    task_types: list[str] = Field(min_length=1)
    """Capabilities: the task types it can run (routing gives it no other, not even by an
    explicit assignee)."""
    labels: list[str] = Field(default_factory=list)
    """Capabilities: a task that carries labels goes only to an agent declaring all of them."""
    max_concurrent: int = Field(default=1, ge=1, le=10_000)
    """The agent's cap: at most this many of its tasks admitted at once, over every worker
    (R12); each worker also runs at most this many at once."""
    rate_limit: str | None = None
    """The name of a ``[rate_limits.NAME]`` bucket every task of this agent draws from."""
    env: list[str] = Field(default_factory=list)
    timeout_secs: int | None = Field(default=None, ge=1, le=7 * 86_400)
    cpu_secs: int | None = Field(default=None, ge=1)
    """CPU seconds an attempt may use; without it, the attempt's timeout."""
    memory_mb: int | None = Field(default=2048, ge=16)
    """Address space of each of the agent's processes (RLIMIT_AS)."""
    open_files: int = Field(default=256, ge=16, le=1_048_576)
    max_processes: int = Field(default=256, ge=4, le=1_000_000)
    """Processes (and threads) the attempt may have at once: a pids cgroup of its own when the
    worker can make one, else RLIMIT_NPROC of the user it runs as."""
    disk_mb: int = Field(default=1024, ge=1, le=16 * 1024 * 1024)
    """What the attempt may write in its working directory (and its private /tmp): a larger
    file cannot be written, and the agent is stopped when the directory grows past it."""
    isolation: Literal["bwrap", "none"] | None = None
    """``bwrap``: a bubblewrap sandbox; ``none``: limits, user and environment only. Unset:
    bwrap where it works (the worker warns at start when it does not)."""
    network: bool = False
    """Keep the host's network under bwrap (the queue database's port and the cloud metadata
    address stay closed)."""
    extra_ro: list[str] = Field(default_factory=list)
    """Paths the sandboxed agent sees read-only (at the same place), e.g. a repository."""
    extra_rw: list[str] = Field(default_factory=list)
    """Paths the sandboxed agent may write besides its working directory."""
    max_output_bytes: int = Field(default=1024 * 1024, ge=1024, le=256 * 1024 * 1024)
    success_exit_codes: list[int] = Field(default_factory=lambda: [0])
    retryable_exit_codes: list[int] = Field(default_factory=lambda: [75])
    kill_grace_secs: float = Field(default=5.0, ge=0, le=600)
    workdir: str | None = None
    keep_workdir: bool = False
    """Keep this agent's working directories whatever ``[worker] keep_workdirs`` says."""

    @field_validator("extra_ro", "extra_rw")
    @classmethod
    def _existing_paths(cls, paths: list[str]) -> list[str]:
        for index, path in enumerate(paths):
            if not os.path.isabs(path):
                raise ValueError(f"{path!r} (item {index}) is not an absolute path")
            if not os.path.exists(path):
                raise ValueError(f"{path!r} (item {index}) does not exist")
        return [os.path.normpath(p) for p in paths]

    @field_validator("env")
    @classmethod
    def _env_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return names


class GuardrailSettings(_Section):
    """A rule that holds matching work in blocked until an approver approves it (R15).

    ``pattern`` is a regular expression (case-insensitive) searched in the title and the
    payload's JSON text; ``task_types`` and ``priorities``, when given, narrow the rule to
    those. ``applies_to`` names the kinds it checks, among those whose pipelines consult
    guardrails (the task pipeline does; the mail pipeline, agents talking to each other, never
    does, and naming it is a configuration error).
    """

    name: str = Field(min_length=1, max_length=64)
    pattern: str = Field(min_length=1, max_length=2000)
    action: str = "require_approval"
    applies_to: list[str] = Field(default_factory=lambda: ["task"], min_length=1)
    task_types: list[str] | None = None
    priorities: list[int] | None = None
    approvers: list[str] | None = None
    """Who may approve work this rule held (default: ``[approval] approvers``)."""

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, pattern: str) -> str:
        import regex  # loaded when a rule is configured (start-up time)

        try:
            regex.compile(pattern, regex.IGNORECASE)
        except (regex.error, RecursionError, OverflowError, ValueError) as exc:
            raise ValueError(f"is not a valid regular expression: {exc}") from None
        problem = blow_up_problem(pattern)
        if problem is not None:
            raise ValueError(problem)
        return pattern

    @field_validator("action")
    @classmethod
    def _action(cls, action: str) -> str:
        if action != "require_approval":
            raise ValueError('must be "require_approval"')
        return action

    @field_validator("priorities")
    @classmethod
    def _priorities(cls, priorities: list[int] | None) -> list[int] | None:
        if priorities is not None and any(not 0 <= p <= 9 for p in priorities):
            raise ValueError("must be priorities from 0 to 9")
        return priorities


class ApprovalSettings(_Section):
    """Who may approve or reject work a guardrail held (R15)."""

    approvers: list[str] = Field(default_factory=list)


class PipelineSettings(_Section):
    """Pipelines per kind (R14): ``task`` and ``mail`` are built in; each module named here is
    imported and registers its own kinds (see agentqueue.pipelines)."""

    modules: list[str] = Field(default_factory=list)


class WorkerSettings(_Section):
    """How workers run."""

    concurrency: int | None = Field(default=None, ge=1, le=10_000)
    """Slots per worker; unset: its handlers' (1000 when all are async, else 10) plus each of
    its agents' ``max_concurrent`` (see agentqueue.worker.tuning)."""
    heartbeat_secs: float | None = Field(default=None, gt=0, le=600)
    grace_secs: float = Field(default=30.0, ge=0, le=3600)
    cancel_grace_secs: float = Field(default=0.5, ge=0, le=60)
    poll_secs: float = Field(default=1.0, gt=0, le=60)
    claims_in_flight: int | None = Field(default=None, ge=1, le=64)
    """Claims a worker keeps under way at once (the database works on one while the worker
    handles another); unset: derived from the slots and the backend."""
    flushes_in_flight: int | None = Field(default=None, ge=1, le=64)
    """Batches of outcomes a worker writes at once; unset: derived like the claims."""
    lease_guard: float = Field(default=0.8, gt=0, lt=1)
    """Heartbeats failing for this fraction of ``[queue] lease_ttl_secs``: the worker stops its
    running attempts (recording no outcome) before their leases lapse."""
    workdir: str | None = None
    run_as: str | None = None
    """The user command agents run as; unset: ``nobody`` when the worker runs as root, else
    the worker's own user."""
    keep_workdirs: Literal["never", "failed", "always"] = "never"
    """Which attempts' working directories stay after the attempt: none, those that did not
    complete, or all."""

    @field_validator("run_as")
    @classmethod
    def _known_user(cls, name: str | None) -> str | None:
        if name is not None:
            try:
                pwd.getpwnam(name)
            except KeyError:
                raise ValueError(f"no user named {name!r} on this host") from None
        return name


class LoggingSettings(_Section):
    """The log lines of ``worker``, ``serve``, ``scheduler`` and ``api`` (``--log-format``
    overrides ``format``; ``AGENTQUEUE_LOG_LEVEL`` overrides ``level``)."""

    format: str = "text"
    """``text`` (one readable line a record) or ``json`` (one JSON object a line)."""
    level: str = "INFO"
    """DEBUG, INFO (one line per task transition), WARNING, ERROR or CRITICAL."""
    opentelemetry: bool = True
    """With the ``otel`` extra installed: a span per attempt, a child of the task's
    ``traceparent`` (see README, Logs)."""

    @field_validator("format")
    @classmethod
    def _format(cls, value: str) -> str:
        from .logsetup import FORMATS

        fmt = value.strip().lower()
        if fmt not in FORMATS:
            raise ValueError(f"must be text or json, not {value!r}")
        return fmt

    @field_validator("level")
    @classmethod
    def _level(cls, value: str) -> str:
        from .logsetup import LEVELS

        level = value.strip().upper()
        level = "WARNING" if level == "WARN" else level
        if level not in LEVELS:
            raise ValueError(f"must be one of {', '.join(LEVELS)}, not {value!r}")
        return level


class MetricsSettings(_Section):
    """The Prometheus metrics at ``/metrics`` (R19)."""

    tenant_label: bool = False
    """Label the queue's metrics with the tenant too (one series per tenant: mind the
    cardinality)."""
    cache_secs: float = Field(default=1.0, ge=0, le=60)
    """A scrape within this many seconds of the last is answered from it."""


class AlertSettings(_Section):
    """Where a P0 task entering dead_letter is announced (R8), besides the error log line.

    The URL may carry a token, so it is kept out of reprs, logs and error messages.
    """

    url: str | None = Field(default=None, repr=False)
    """The webhook that gets a POST (JSON) for each alert; none: the log line only."""
    timeout_secs: float = Field(default=10.0, gt=0, le=300)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is None or url == "":
            return None
        scheme, sep, rest = url.partition("://")
        host = rest.split("/", 1)[0].split("?", 1)[0].rpartition("@")[2]
        # The message never repeats the value: it may hold a secret.
        if not sep or scheme.lower() not in ("http", "https") or not host or url != url.strip():
            raise ValueError("must be an http:// or https:// URL with a host")
        return url


class DeliverySettings(_Section):
    """How a kind of delivery is tried: each try waits ``timeout_secs`` at most; a failed one
    is tried again after ``backoff_first_secs`` doubling up to ``backoff_max_secs`` (spread by
    jitter), until ``horizon_hours`` after it was stored, when it is given up."""

    timeout_secs: float = Field(default=10.0, gt=0, le=300)
    horizon_hours: float = Field(default=24.0, gt=0, le=24 * 90)
    backoff_first_secs: float = Field(default=5.0, gt=0, le=86_400)
    backoff_max_secs: float = Field(default=3600.0, gt=0, le=86_400)


def _env_name(name: str | None) -> str | None:
    if name is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError("must name an environment variable")
    return name or None


class CallbackSettings(DeliverySettings):
    """Callbacks (R17): a task's end POSTed to its callback_url, signed the Standard Webhooks
    way with the secret (``whsec_...``) in the environment variable ``secret_env``; without it,
    callbacks wait in the outbox. ``allow_private`` lets callbacks reach loopback and private
    addresses (tests, a private network): otherwise they are refused at submit and at send."""

    secret_env: str | None = None
    allow_private: bool = False

    _secret_env = field_validator("secret_env")(_env_name)


DEFAULT_REPLY_TEMPLATE = """\
{%- set icon = {"completed": "✅", "failed": "❌", "dead_letter": "☠️", "cancelled": "🚫"} -%}
{{ icon.get(state, "") }} agentqueue task **{{ title | truncate(200) }}** \
(`{{ task_type }}`, `{{ task_id }}`) ended **{{ state }}**\
{% if retry_count %} after {{ retry_count }} \
retr{{ "y" if retry_count == 1 else "ies" }}{% endif %}.
{% if error %}
> {{ error | truncate(1000) }}
{% endif %}
{%- if result_text %}
<details><summary>Result</summary>

```
{{ result_text | truncate(3000) }}
```
</details>
{% endif %}"""


class GitHubSettings(DeliverySettings):
    """Replies on the GitHub issue or pull request a task came from (source ``issue`` or ``pr``,
    source_id ``owner/repo#N``): one comment per task end, rendered from ``reply_template``
    (Jinja2, sandboxed), posted with the token in the environment variable ``token_env``;
    without it, replies wait in the outbox."""

    api_url: str = "https://api.github.com"
    token_env: str | None = None
    reply_template: str = DEFAULT_REPLY_TEMPLATE

    _token_env = field_validator("token_env")(_env_name)

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, url: str) -> str:
        scheme, sep, rest = url.partition("://")
        if not sep or scheme.lower() not in ("http", "https") or not rest.split("/", 1)[0]:
            raise ValueError("must be an http:// or https:// URL with a host")
        return url.rstrip("/")

    @field_validator("reply_template")
    @classmethod
    def _template(cls, text: str) -> str:
        from jinja2 import TemplateSyntaxError
        from jinja2.sandbox import SandboxedEnvironment

        try:
            SandboxedEnvironment().parse(text)
        except TemplateSyntaxError as exc:
            raise ValueError(f"line {exc.lineno}: {exc.message}") from None
        return text


MAX_PROMPT_BYTES = 256 * 1024
"""The largest prompt template file (256 KiB)."""


class PromptSettings(_Section):
    """One prompt template (``[prompts.NAME]``, NAME a task type, a kind or ``default``): the
    Jinja2 text inline as ``template``, or in the UTF-8 file ``file`` (a relative path is taken
    from the directory the command runs in, like an agent's command), read when the
    configuration is loaded. See :mod:`agentqueue.prompts` for what a template sees."""

    template: str | None = None
    file: Path | None = None
    _text: str = PrivateAttr(default="")

    @model_validator(mode="after")
    def _one_text(self) -> PromptSettings:
        if (self.template is None) == (self.file is None):
            raise ValueError("template: give the template inline or as file = PATH, one of them")
        if self.file is not None:
            self._text = _read_prompt_file(self.file)
        else:
            self._text = self.template or ""
        return self

    @property
    def text(self) -> str:
        """The template's text (the file's, when it names one)."""
        return self._text


def _read_prompt_file(path: Path) -> str:
    try:
        with open(path, "rb") as stream:
            raw = read_bounded(stream, MAX_PROMPT_BYTES, "file")
    except OSError as exc:
        raise ValueError(f"file: cannot read {path}: {exc.strerror}") from None
    except InvalidInput as exc:
        raise ValueError(f"file: {path} {exc.problems[0].message}") from None
    try:
        return utf8_text(raw, "file")
    except InvalidInput as exc:
        raise ValueError(f"file: {path} {exc.problems[0].message}") from None


class RetentionSettings(_Section):
    """How long dead letters are kept before they are purged (R8), in days."""

    dead_letter_p0_days: float = Field(default=30.0, gt=0, le=36_500)
    dead_letter_days: float = Field(default=7.0, gt=0, le=36_500)

    def policy(self) -> RetentionPolicy:
        """As the domain's RetentionPolicy."""
        return RetentionPolicy(self.dead_letter_p0_days, self.dead_letter_days)


def _read_key(source: str, where: str) -> AuditKey:
    """The audit key at ``source`` (``file:PATH`` or ``env:NAME``). Errors name the place, never
    the key."""
    kind, _, name = source.partition(":")
    if kind == "file":
        try:
            secret = Path(name).expanduser().read_bytes().strip()
        except OSError as exc:
            raise ValueError(f"cannot read the key file {name} ({exc.strerror})") from None
    elif kind == "env":
        if not _ENV_NAME.match(name):
            raise ValueError("must name an environment variable")
        value = os.environ.get(name)
        if value is None:
            raise ValueError(f"the environment variable {name} is not set")
        secret = value.strip().encode()
    else:
        raise ValueError(f"{where}: give file:PATH or env:NAME")  # never the value itself
    if len(secret) < 16:
        raise ValueError(f"the key at {source} is shorter than 16 bytes")
    return AuditKey(secret)


class AuditSettings(_Section):
    """Tamper evidence (R24). ``key_file`` or ``key_env`` holds the key every audit hash and
    anchor is signed with (HMAC-SHA256): keep it outside the database, or someone with the
    database can re-hash what they change. ``old_keys`` (each ``file:PATH`` or ``env:NAME``)
    still verify what older keys signed. ``anchor_file`` gets a copy of every anchor (one JSON
    line each, appended); the scheduler leader anchors once a minute."""

    key_file: Path | None = None
    key_env: str | None = None
    old_keys: list[str] = Field(default_factory=list)
    anchor_file: Path | None = None

    @field_validator("key_file")
    @classmethod
    def _key_file(cls, path: Path | None) -> Path | None:
        if path is not None:
            _read_key(f"file:{path}", "key_file")  # unreadable or short: fails at load
        return path

    @field_validator("key_env")
    @classmethod
    def _key_env(cls, name: str | None) -> str | None:
        name = _env_name(name)
        if name is not None:
            _read_key(f"env:{name}", "key_env")
        return name

    @field_validator("old_keys")
    @classmethod
    def _old_keys(cls, sources: list[str]) -> list[str]:
        for source in sources:
            _read_key(source, "old_keys")
        return sources

    @model_validator(mode="after")
    def _one_key(self) -> AuditSettings:
        if self.key_file is not None and self.key_env is not None:
            raise ValueError("give key_file or key_env, not both")
        return self

    def keyring(self) -> Keyring:
        """The keys as the audit chain uses them (read now from their files or variables)."""
        current = None
        if self.key_file is not None:
            current = _read_key(f"file:{self.key_file}", "key_file")
        elif self.key_env is not None:
            current = _read_key(f"env:{self.key_env}", "key_env")
        old = tuple(_read_key(source, "old_keys") for source in self.old_keys)
        return Keyring(current, old)


class ApiSettings(_Section):
    """The HTTP API (``agentqueue serve`` and ``agentqueue api``)."""

    host: str = "127.0.0.1"
    port: int = Field(default=8077, ge=0, le=65_535)
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    """A request body past this is refused (413) before it is read whole."""
    requests_per_minute: float = Field(default=6000.0, ge=0, le=100_000_000)
    """Requests each token may make per minute in each API process (0: no limit); past it a
    request is answered 429 with Retry-After."""
    burst: int = Field(default=200, ge=1, le=1_000_000)
    """Requests a token may make at once before its rate applies."""
    token_cache_secs: float = Field(default=5.0, ge=0, le=300)
    """How long a process trusts a token it has checked; a revoked token stops working in
    every API process within this time."""
    max_wait_secs: float = Field(default=60.0, gt=0, le=3600)
    """The longest ``?wait=`` a request may ask for."""


GITHUB_ASSOCIATIONS = frozenset(
    {
        "OWNER",
        "MEMBER",
        "COLLABORATOR",
        "CONTRIBUTOR",
        "FIRST_TIME_CONTRIBUTOR",
        "FIRST_TIMER",
        "MANNEQUIN",
        "NONE",
    }
)
"""The values GitHub gives ``author_association``."""
COMMAND_WORDS = frozenset({"cancel", "retry", "priority"})
"""Comment commands with a built-in meaning, which ``commands`` cannot map to a task type."""
_REPO_GLOB = re.compile(r"^[A-Za-z0-9_.*?\[\]!-]+/[A-Za-z0-9_.*?\[\]!-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_WORD = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


def _type_name(value: str, what: str) -> str:
    try:
        return check_name(value, what)
    except ValueError as exc:
        raise ValueError(str(exc)) from None


class GitHubRule(_Section):
    """How webhook deliveries from matching repositories become tasks (R18).

    A delivery is taken only if its ``X-Hub-Signature-256`` verifies with the secret in the
    environment variable ``secret_env`` of a rule whose ``repository`` glob matches the
    delivery's repository; the first such rule decides what the delivery does. The secret is
    read from the environment when a delivery arrives: never from the file or the database.
    """

    repository: str
    """``owner/name`` glob (``octo/*``, ``octo/api-?``), matched without regard to case."""
    tenant: str
    """The tenant of every task this rule makes."""
    secret_env: str
    """The environment variable holding the webhook's secret."""
    labels: dict[str, str] = Field(default_factory=dict)
    """A label added (or an issue or pull request opened with it) -> the task type it asks
    for, e.g. ``"agent:fix" = "bugfix"``."""
    commands: dict[str, str] = Field(default_factory=lambda: {"fix": "bugfix", "review": "review"})
    """``/agent WORD`` (or a mention, ``@handle WORD``) in a new comment -> the task type it
    asks for. ``cancel``, ``retry`` and ``priority`` are built in."""
    mention: str | None = None
    """A handle such as ``@agentqueue``: ``@agentqueue fix`` in a comment works as
    ``/agent fix`` (none: only ``/agent`` commands)."""
    authors: list[str] = Field(default_factory=lambda: ["OWNER", "MEMBER", "COLLABORATOR"])
    """The ``author_association`` values whose comments, labels and pull requests are acted
    on; anyone else's are ignored (answered and logged with the reason)."""
    priority_labels: dict[str, int] = Field(
        default_factory=lambda: {"priority:P0": 0, "priority:P1": 5, "priority:P2": 9}
    )
    """Labels that set the priority of the issue's or pull request's task."""
    review_pull_requests: bool = True
    """Review each pull request's head commit: on opened, reopened, ready_for_review and
    synchronize (drafts wait for ready_for_review); a push cancels the review of the older
    commit."""
    review_task_type: str = "review"

    @field_validator("repository")
    @classmethod
    def _repository(cls, value: str) -> str:
        if not _REPO_GLOB.match(value):
            raise ValueError("must be an owner/name glob such as octo/* or octo/api")
        return value

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        return _type_name(value, "tenant")

    @field_validator("secret_env")
    @classmethod
    def _secret_env(cls, value: str) -> str:
        if not _ENV_NAME.match(value):
            raise ValueError("must be an environment variable name (the secret is never here)")
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for label, task_type in value.items():
            if not label.strip() or len(label) > 100:
                raise ValueError(f"{label!r} is not a label name")
            _type_name(task_type, f"the task type of {label!r}")
        return value

    @field_validator("commands")
    @classmethod
    def _commands(cls, value: dict[str, str]) -> dict[str, str]:
        for word, task_type in value.items():
            if not _WORD.match(word):
                raise ValueError(f"{word!r} must be a lower-case word")
            if word in COMMAND_WORDS:
                raise ValueError(f"{word!r} is a built-in command")
            _type_name(task_type, f"the task type of {word!r}")
        return value

    @field_validator("mention")
    @classmethod
    def _mention(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"@[A-Za-z0-9][A-Za-z0-9-]{0,38}", value):
            raise ValueError("must be a GitHub handle such as @agentqueue")
        return value

    @field_validator("authors")
    @classmethod
    def _authors(cls, value: list[str]) -> list[str]:
        unknown = [a for a in value if a not in GITHUB_ASSOCIATIONS]
        if unknown:
            known = ", ".join(sorted(GITHUB_ASSOCIATIONS))
            raise ValueError(f"{unknown[0]!r} is not an author_association (one of {known})")
        return value

    @field_validator("priority_labels")
    @classmethod
    def _priority_labels(cls, value: dict[str, int]) -> dict[str, int]:
        for label, priority in value.items():
            if not 0 <= priority <= 9:
                raise ValueError(f"the priority of {label!r} must be from 0 to 9")
        return value

    @field_validator("review_task_type")
    @classmethod
    def _review_type(cls, value: str) -> str:
        return _type_name(value, "review_task_type")


class IntakeSettings(_Section):
    """Where work comes from besides direct submits: ``[[intake.github]]`` rules."""

    github: list[GitHubRule] = Field(default_factory=list)


TEXT_FIELDS = frozenset({TEXT_FIELD})
"""Top-level fields of type ``str | None``, which any variable's text is a valid value of
(``WHOLE_EXCLUDED``, the fields not read from their own variable, and this one are defined in
agentqueue.unconfigured, which tells an unconfigured process without loading these models)."""


def environment(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What the ``AGENTQUEUE_`` variables of ``environ`` (default: this process's) set, as a
    configuration table (see agentqueue.envsettings for the rules)."""
    return environment_values(
        Settings, os.environ if environ is None else environ, ENV_PREFIX, WHOLE_EXCLUDED
    )


class Settings(BaseModel):
    """Everything configurable. Build with :func:`load_settings`.

    Built directly, ``Settings(**values)`` reads the environment too: its overrides beat
    ``values`` (top-level names matched without regard to case), as :func:`load_settings` does
    with the file's table."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    def __init__(self, **values: Any) -> None:
        super().__init__(**deep_update(by_field_name(Settings, values), environment()))

    db: str | None = None
    """Database URL, used when neither the caller nor AGENTQUEUE_DB names one."""
    queue: QueueSettings = Field(default_factory=QueueSettings)
    retry: RetrySettings = Field(default_factory=RetrySettings)
    task_types: dict[str, TaskTypeSettings] = Field(default_factory=dict)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    agents: dict[str, AgentSettings] = Field(default_factory=dict)
    admission: AdmissionSettings = Field(default_factory=AdmissionSettings)
    rate_limits: dict[str, RateLimitSettings] = Field(default_factory=dict)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    tools: ToolSettings = Field(default_factory=ToolSettings)
    preemption: PreemptionSettings = Field(default_factory=PreemptionSettings)
    alerts: AlertSettings = Field(default_factory=AlertSettings)
    callbacks: CallbackSettings = Field(default_factory=CallbackSettings)
    github: GitHubSettings = Field(default_factory=GitHubSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    guardrails: list[GuardrailSettings] = Field(default_factory=list)
    approval: ApprovalSettings = Field(default_factory=ApprovalSettings)
    pipelines: PipelineSettings = Field(default_factory=PipelineSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    intake: IntakeSettings = Field(default_factory=IntakeSettings)
    prompts: dict[str, PromptSettings] = Field(default_factory=dict)
    """Prompt templates by task type, kind or ``default`` (see :mod:`agentqueue.prompts`)."""
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    _source: Path | None = PrivateAttr(default=None)

    @property
    def source(self) -> Path | None:
        """The file these settings were read from (None: defaults and environment only)."""
        return self._source

    @model_validator(mode="after")
    def _known_rate_limits(self) -> Settings:
        named = [
            (f"task_types.{name}.rate_limit", t.rate_limit) for name, t in self.task_types.items()
        ] + [(f"agents.{name}.rate_limit", a.rate_limit) for name, a in self.agents.items()]
        for where, limit in named:
            if limit is not None and limit not in self.rate_limits:
                raise ValueError(f"{where}: no [rate_limits.{limit}] is configured")
        names = [g.name for g in self.guardrails]
        for index, name in enumerate(names):
            if name in names[:index]:
                raise ValueError(f"guardrails.{index}.name: {name!r} is used by another rule")
        for name, prompt in self.prompts.items():
            try:
                check_prompt(name, prompt.text)
            except PromptError as exc:
                where = "file" if prompt.file is not None else "template"
                origin = f" ({prompt.file})" if prompt.file is not None else ""
                raise ValueError(f"prompts.{name}.{where}: {exc}{origin}") from None
        return self

    def prompt_templates(self) -> Prompts:
        """The configured prompt templates (compiled when first rendered)."""
        return Prompts(
            {
                name: PromptTemplate(name, p.text, str(p.file) if p.file is not None else "")
                for name, p in self.prompts.items()
            }
        )

    @property
    def admission_limited(self) -> bool:
        """Whether admission weighs caps or rate limits (then every task waits for the
        scheduler, which counts what is admitted; nothing is admitted as it is submitted)."""
        return (
            self.admission.max_active is not None
            or bool(self.agents)
            or any(t.rate_limit for t in self.task_types.values())
        )

    @property
    def claims_admit(self) -> bool:
        """Whether admission is under a global cap alone (no agents, no rate limits): then a
        worker's claim admits what it takes, counting the cap itself (ClaimParams.admit), and
        the scheduler admits only when fair share has several tenants to weigh."""
        return (
            self.admission.max_active is not None
            and not self.agents
            and not any(t.rate_limit for t in self.task_types.values())
        )

    def timeouts(self) -> dict[str, int]:
        """Configured attempt timeouts by task_type."""
        return {name: t.timeout_secs for name, t in self.task_types.items() if t.timeout_secs}


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """Read the TOML file at ``path`` (if any) and the environment; raise ConfigError if bad.
    The file is read to at most MAX_CONFIG_BYTES (one more byte is refused)."""
    data: dict[str, Any] = {}
    if path is not None:
        file = Path(path)
        try:
            with open(file, "rb") as stream:
                raw = read_bounded(stream, MAX_CONFIG_BYTES, "config")
        except FileNotFoundError:
            raise ConfigError(f"no such file: {file}", "config") from None
        except OSError as exc:
            raise ConfigError(f"cannot read {file}: {exc.strerror}", "config") from None
        except InvalidInput as exc:
            raise ConfigError(f"{file} {exc.problems[0].message}", "config") from None
        data = parse_config_text(raw, str(file))
    settings = settings_from(data)
    if path is not None:
        settings._source = Path(os.path.abspath(path))
    return settings


def parse_config_text(raw: bytes | str, name: str = "the configuration") -> dict[str, Any]:
    """TOML text as a table, within the bounds of domain.limits (UTF-8, no NUL in a string or a
    key, nesting, whole-number length); ConfigError naming the setting otherwise."""
    try:
        text = raw if isinstance(raw, str) else utf8_text(raw, "config")
    except InvalidInput as exc:
        raise ConfigError(f"{name} {exc.problems[0].message}", "config") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{name} is not valid TOML: {exc}", "config") from None
    except RecursionError:
        raise ConfigError(f"{name} is not valid TOML: nested too deep", "config") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            exc = ValueError("a whole number of more than 4300 digits")
        raise ConfigError(f"{name} is not valid TOML: {exc}", "config") from None
    problem = json_problem(data)
    if problem is not None:
        where, message = problem
        raise ConfigError(message, where or "config")
    return data


def settings_from(data: dict[str, Any]) -> Settings:
    """Settings from a parsed configuration table and the environment; ConfigError if bad.
    When neither sets anything but text fields (``AGENTQUEUE_DB``), the defaults built without
    validation (see :func:`default_settings`), with that text."""
    if not data:
        overrides = environment()
        if overrides.keys() <= TEXT_FIELDS:
            # Text is all a text field takes (AGENTQUEUE_DB): nothing to validate.
            return unconfigured_settings(overrides.get("db"))
    try:
        settings = Settings(**data)
    except ValidationError as exc:
        problems = [_problem(err) for err in exc.errors(include_url=False, include_input=False)]
        raise ConfigError(problems) from None
    return settings


def default_settings() -> Settings:
    """The default settings, built without validation (the defaults are valid: a test holds
    them equal to ``Settings()`` validated), so that a command with no configuration builds no
    validator (start-up time). The environment is not read."""
    return _construct(Settings)


def unconfigured_settings(db: str | None) -> Settings:
    """The settings of an unconfigured process (see agentqueue.unconfigured): the defaults,
    with ``db`` when ``AGENTQUEUE_DB`` gave it, as :func:`settings_from` builds them then."""
    settings = default_settings()
    return settings if db is None else settings.model_copy(update={"db": db})


def _construct(model: type[M]) -> M:
    values: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        factory = field.default_factory
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            values[name] = _construct(factory)
        elif factory is not None:
            values[name] = factory()  # type: ignore[call-arg]
        elif field.is_required():
            raise TypeError(f"{model.__name__}.{name} has no default")
        else:
            values[name] = field.default
    return model.model_construct(_fields_set=set(), **values)


def plain(value: Any) -> Any:
    """``value`` (settings, a section, or a value of one) as plain data, the same as pydantic's
    ``model_dump(mode="json")`` gives for these models: a model as a dict of its fields, a path
    as text, a tuple as a list. Built by walking the fields, so no serializer is built (which
    costs a long-running command's start about 25 ms and, on first use, pydantic's plugin
    search); the tests hold the two equal."""
    if isinstance(value, BaseModel):
        return {name: plain(getattr(value, name)) for name in type(value).model_fields}
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _problem(err: Any) -> FieldProblem:
    path = [str(p) for p in err["loc"]]
    if err["type"] == "extra_forbidden":
        return FieldProblem(".".join(path), "unknown setting")
    message = str(err["msg"]).removeprefix("Value error, ")
    # Rules over several values name the one at fault first: "renew_secs: must be ...".
    head, sep, rest = message.partition(": ")
    if sep and re.fullmatch(r"[A-Za-z_][\w.]*", head):
        path.append(head)
        message = rest
    return FieldProblem(".".join(path), message)
