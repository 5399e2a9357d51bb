"""Configuration, read from the environment and validated before the worker starts.

Every knob an operator may need during an incident is an environment variable, so it can
be tuned without a deploy. A bad value refuses to boot: `load_settings()` raises
`ConfigError`, which names every offending variable at once, and the CLI turns it into a
non-zero exit without a traceback.

Per-queue overrides use `WORKER_QUEUE_<KEY>_<SETTING>`, where KEY is the queue name in
upper case with every character other than A-Z and 0-9 replaced by `_`
(`orders.fifo` -> `ORDERS_FIFO`; two queues with one KEY are refused). Settings: URL,
CONCURRENCY, JOB_TIMEOUT_MS, VISIBILITY_TIMEOUT_SECONDS, POLLERS, RATE_LIMIT,
RATE_BURST, GROUP_CONCURRENCY, PREFETCH, ADAPTIVE_CONCURRENCY, CONCURRENCY_FLOOR, WEIGHT. A per-queue
value is read by the same reader as its global one (`whole_number`, `rate_per_second`).
Kubernetes' service links (service_links.py) are dropped before any of the engine's
settings is read: whatever its name (a Service `worker-metrics` writes
WORKER_METRICS_PORT=tcp://...), a link is never a setting.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from ..base.limits import (
    LARGE_PAYLOAD_MAX_BYTES,
    MAX_QUEUE_NAME,
    MAX_RECEIVE_BATCH,
    MAX_VISIBILITY_SECONDS,
    MAX_WAIT_SECONDS,
    RESERVED_PREFIXES,
    SECRET_NAME_PATTERN,
)
from ..runtime.protections.budget import PRIORITIES, Priority
from ..runtime.protections.prefetch import default_prefetch
from ..runtime.protections.throttle import parse_rate, window_of
from ..runtime.settling.lease import heartbeat_problem
from .loops import EventLoop, loop_problem, uvloop_installed
from .otlp_metrics import exporter_problem, otlp_installed
from .service_links import service_link

# S3's rule for bucket names (the common subset: lower case, digits, dots, hyphens).
BUCKET_NAME = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
# SQS's own rule for queue names (CreateQueue API reference).
QUEUE_NAME_RE = re.compile(rf"^(?=.{{1,{MAX_QUEUE_NAME}}}$)[A-Za-z0-9_-]+(\.fifo)?$")
MAX_POLLERS = 100  # long polls (and connections) one queue may hold open at once
QUEUE_OVERRIDE_PREFIX = "WORKER_QUEUE_"
QUEUE_OVERRIDES = (
    "URL",
    "CONCURRENCY",
    "JOB_TIMEOUT_MS",
    "VISIBILITY_TIMEOUT_SECONDS",
    "POLLERS",
    "RATE_LIMIT",
    "RATE_BURST",
    "GROUP_CONCURRENCY",
    "PREFETCH",
    "ADAPTIVE_CONCURRENCY",
    "CONCURRENCY_FLOOR",
    "WEIGHT",
)
# A whole number, global or per queue, is plain digits 0-9 (a minus sign for the range
# check to name): int() also takes fullwidth and Arabic-Indic digits, "1_0", "+5" and
# spaces, pydantic "5.0".
NOT_WHOLE = "not a whole number: write it in digits 0-9 (e.g. 8)"
_WHOLE = re.compile(r"-?[0-9]+")
# More digits than any bound has: out of range whatever they say (int() refuses 4,300),
# read as this.
_WHOLE_DIGITS = 30
_BEYOND_ANY_BOUND: int = int("1" + "0" * _WHOLE_DIGITS)
# The slowest rate limit taken: one start a day. Below it a queue would in effect never start
# again (2.8e-39/s was taken: one start in 10^31 years); to stop a queue, leave it out.
MIN_RATE_PER_SECOND = 1 / 86_400
# How pydantic reads a boolean variable; a per-queue override is read the same way.
TRUE_WORDS = frozenset({"1", "true", "t", "yes", "y", "on"})
FALSE_WORDS = frozenset({"0", "false", "f", "no", "n", "off"})


@dataclass(frozen=True)
class ServiceDefaults:
    """What a service tells the engine about itself: its name and version (logs, metrics,
    `OTEL_SERVICE_NAME`'s default), the command that runs it (for messages), and defaults
    for environment variables (`{"WORKER_QUEUES": "orders", ...}`: the answers it was
    generated with). A default is read exactly like the variable it stands for and
    validated the same way; the environment always wins.

    `settings`: the service's own settings (an API's URL, a token), a pydantic-settings
    model whose fields name their variables (`validation_alias="PARTNER_API_URL"`; else the
    env_prefix and the field's name in upper case). They are validated at boot with the
    engine's, by the same rules: a bad or missing one refuses to start (exit 2) naming the
    variable (its value hidden when the field is a secret or a URL), `config` prints them
    (secrets redacted) as `service_settings`, and `WorkerConfig.own` is the validated model."""

    name: str = "sqs-worker"
    version: str = "0.0.0"
    command: str = "python -m sqs_worker_engine"
    environ: Mapping[str, str] = field(default_factory=dict)
    settings: type[BaseSettings] | None = None
    # The owner's secrets (`secrets` answer at bake time: API_TOKEN, a second database...):
    # environment variables the deploy files fill from Secrets Manager or SSM. The engine
    # never reads them; `config` and the start-up line say whether each is set, never its value.
    secrets: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        known = set(_ALIASES) | set(own_variables(self.settings))
        unknown = sorted(set(self.environ) - known)
        if unknown:
            raise ValueError(f"ServiceDefaults.environ names unknown settings: {', '.join(unknown)}")
        for name in self.secrets:
            problem = secret_name_problem(name)
            if problem:
                raise ValueError(f"ServiceDefaults.secrets: {name!r} {problem}")


def secret_name_problem(name: str) -> str | None:
    """Why `name` cannot be an owner secret's variable (None when it can): an environment
    variable name in upper case that no engine setting uses (DATABASE_URL aside: the engine
    reads it for readiness, and it is a secret like the others)."""
    if not re.match(SECRET_NAME_PATTERN, name):
        return "is not an environment variable name (A-Z, 0-9 and _, starting with a letter)"
    if name.startswith(RESERVED_PREFIXES) or (name in _ALIASES and name != "DATABASE_URL"):
        return "is a setting of the engine or the SDKs, not a secret of the service's own"
    return None


class ConfigError(Exception):
    """The environment holds values the worker refuses to start with."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        lines = [f"  {var}: {msg}" for var, msg in problems]
        super().__init__("invalid configuration:\n" + "\n".join(lines))


class Settings(BaseSettings):
    """Process-wide settings. Field aliases are the environment variable names."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # load_settings hands over every value, from the environment it was given (os.environ
        # or a mapping): a second reading of os.environ here would leak the process's own
        # variables into a mapping's settings, and costs more than the validation itself.
        return (init_settings,)

    queues: Annotated[list[str], NoDecode] = Field(default=[], validate_default=True, validation_alias="WORKER_QUEUES")
    concurrency: int = Field(default=8, ge=1, le=1000, validation_alias="WORKER_CONCURRENCY")
    job_timeout_ms: int = Field(
        default=60_000,
        ge=100,
        le=MAX_VISIBILITY_SECONDS * 1000,
        validation_alias="WORKER_JOB_TIMEOUT_MS",
    )
    shutdown_timeout_ms: int = Field(
        default=90_000,
        ge=100,
        le=MAX_VISIBILITY_SECONDS * 1000,
        validation_alias="WORKER_SHUTDOWN_TIMEOUT_MS",
    )
    visibility_timeout_seconds: int = Field(
        default=30,
        ge=2,
        le=MAX_VISIBILITY_SECONDS,
        validation_alias="WORKER_VISIBILITY_TIMEOUT_SECONDS",
    )
    heartbeat_fraction: float = Field(default=0.5, ge=0.1, le=0.9, validation_alias="WORKER_HEARTBEAT_FRACTION")
    wait_time_seconds: int = Field(
        default=MAX_WAIT_SECONDS, ge=0, le=MAX_WAIT_SECONDS, validation_alias="WORKER_WAIT_TIME_SECONDS"
    )
    pollers: int = Field(default=0, ge=0, le=MAX_POLLERS, validation_alias="WORKER_POLLERS")
    # On shutdown, a long poll still waiting on an empty queue is cancelled so the worker
    # exits at once. SQS does not notice: that abandoned poll can take a message arriving
    # in the next WaitTimeSeconds and hide it for its visibility timeout. `true` waits the
    # poll out instead (no message is ever held that way; an idle stop takes up to 20 s).
    drain_polls: bool = Field(default=False, validation_alias="WORKER_DRAIN_POLLS")
    retry_base_seconds: float = Field(
        default=10.0, ge=0, le=MAX_VISIBILITY_SECONDS, validation_alias="WORKER_RETRY_BASE_SECONDS"
    )
    retry_max_seconds: float = Field(
        default=300.0, ge=0, le=MAX_VISIBILITY_SECONDS, validation_alias="WORKER_RETRY_MAX_SECONDS"
    )
    ack_flush_ms: int = Field(default=100, ge=1, le=10_000, validation_alias="WORKER_ACK_FLUSH_MS")
    max_receive_count: int = Field(default=5, ge=1, le=1000, validation_alias="WORKER_MAX_RECEIVE_COUNT")
    process_pool_size: int = Field(default=0, ge=0, le=256, validation_alias="WORKER_PROCESS_POOL_SIZE")
    # None: the service names none; `run` then requires WORKER_HANDLERS.
    handlers: str | None = Field(default=None, validation_alias="WORKER_HANDLERS")
    worker_id: str = Field(
        default_factory=socket.gethostname, min_length=1, max_length=128, validation_alias="WORKER_ID"
    )

    metrics_host: str = Field(default="0.0.0.0", min_length=1, validation_alias="WORKER_METRICS_HOST")  # noqa: S104 - scraped from outside the container
    metrics_port: int = Field(default=9102, ge=0, le=65535, validation_alias="WORKER_METRICS_PORT")
    # Where metrics go (otlp_metrics.py): scraped at /metrics, pushed over OTLP/HTTP to
    # OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT with the same names, or both.
    metrics_exporter: Literal["prometheus", "otlp", "both"] = Field(
        default="prometheus", validation_alias="WORKER_METRICS_EXPORTER"
    )
    # Bounded: an absurd or infinite threshold would switch liveness off without a word.
    stalled_after_seconds: float | None = Field(
        default=None, gt=0, le=2 * MAX_VISIBILITY_SECONDS, validation_alias="WORKER_STALLED_AFTER_SECONDS"
    )
    # Each worker process writes its own progress file: this path with its pid before the
    # suffix (health.progress_file). Empty: $TMPDIR/<service>.progress.
    health_file: str = Field(default="", validation_alias="WORKER_HEALTH_FILE")
    backlog_sample_seconds: float = Field(default=30.0, ge=1, le=3600, validation_alias="WORKER_BACKLOG_SAMPLE_SECONDS")
    scale_in_protection_minutes: int = Field(
        default=5, ge=1, le=2880, validation_alias="WORKER_SCALE_IN_PROTECTION_MINUTES"
    )
    ecs_agent_uri: str | None = Field(default=None, validation_alias="ECS_AGENT_URI")

    # Large payloads (the SQS extended client's format, see offload.py). A received pointer
    # is followed only into the payload bucket or a listed one (a producer writes the
    # pointer); the bucket is also where this service offloads what it sends (`send`, the
    # producer) and the only one it deletes processed payloads in.
    large_payload_bucket: str | None = Field(
        default=None, pattern=BUCKET_NAME, validation_alias="WORKER_LARGE_PAYLOAD_BUCKET"
    )
    large_payload_read_buckets: Annotated[list[str], NoDecode] = Field(
        default=[], validation_alias="WORKER_LARGE_PAYLOAD_READ_BUCKETS"
    )
    # The largest offloaded payload a job reads; a pointer to a larger object is dead-lettered.
    large_payload_max_bytes: int = Field(
        default=LARGE_PAYLOAD_MAX_BYTES, ge=1, le=2**31, validation_alias="WORKER_LARGE_PAYLOAD_MAX_BYTES"
    )
    large_payload_threshold_bytes: int = Field(
        default=262_144, ge=1, le=1_048_576, validation_alias="WORKER_LARGE_PAYLOAD_THRESHOLD_BYTES"
    )
    large_payload_delete: bool = Field(default=False, validation_alias="WORKER_LARGE_PAYLOAD_DELETE")

    # SNS notifications' signatures checked before a handler sees them (signatures.py);
    # false only for queues whose queue policy admits the topics alone (aws:SourceArn).
    sns_verify_signatures: bool = Field(default=True, validation_alias="WORKER_SNS_VERIFY_SIGNATURES")

    # Jobs started per second and process, per queue ("50/s", "3000/min"; see throttle.py);
    # empty: no limit but the concurrency.
    rate_limit: str | None = Field(default=None, validation_alias="WORKER_RATE_LIMIT")
    # Starts the rate limit lets go together (unset: 1, evenly spaced); at most the rate's
    # count in a window (throttle.py).
    rate_burst: int | None = Field(default=None, ge=1, le=1_000_000, validation_alias="WORKER_RATE_BURST")
    # Fair tenants on standard queues (tenants.py): jobs of one MessageGroupId running at once
    # per queue and process; unset: no cap but the concurrency. FIFO runs one per group anyway.
    group_concurrency: int | None = Field(default=None, ge=1, le=1000, validation_alias="WORKER_GROUP_CONCURRENCY")
    # Messages a pool may hold beyond its concurrency, received ahead of free slots so that
    # a slot never waits a receive's round trip (prefetch.py sizes it within this); each
    # is one more message a SIGKILL strands for a visibility timeout. Unset: three times the
    # queue's concurrency, at least 50, at most 200 or the concurrency
    # (prefetch.default_prefetch); 0: off.
    prefetch: int | None = Field(default=None, ge=0, le=10_000, validation_alias="WORKER_PREFETCH")
    # Adaptive concurrency (adaptive.py): the handlers running at once move between the floor
    # and WORKER_CONCURRENCY, then the ceiling, following the downstream's latency.
    adaptive_concurrency: bool = Field(default=False, validation_alias="WORKER_ADAPTIVE_CONCURRENCY")
    concurrency_floor: int = Field(default=1, ge=1, le=1000, validation_alias="WORKER_CONCURRENCY_FLOOR")
    # Run to completion (completion.py): the process runs at most this many jobs (messages
    # whose handler was called, every queue together), receiving nothing it will not run,
    # then drains and exits 0; and exits 0 after this long with nothing held. Unset: never.
    # Process-wide, not per queue: the pod or task is what ends.
    max_jobs: int | None = Field(default=None, ge=1, le=1_000_000_000, validation_alias="WORKER_MAX_JOBS")
    idle_exit_seconds: float | None = Field(
        default=None, gt=0, le=7 * 86_400, validation_alias="WORKER_IDLE_EXIT_SECONDS"
    )
    # Priorities on one budget (budget.py): the queues of this process share this many
    # running jobs; unset, each queue runs its own concurrency. WORKER_PRIORITY chooses who
    # gets a free slot: `weighted` (the default; WORKER_QUEUE_<KEY>_WEIGHT) or `strict` (in
    # the order of WORKER_QUEUES).
    shared_concurrency: int | None = Field(default=None, ge=1, le=1000, validation_alias="WORKER_SHARED_CONCURRENCY")
    priority: Priority | None = Field(default=None, validation_alias="WORKER_PRIORITY")
    # Tracing (tracing.py): the producer's span as the parent of each job's, or a link only.
    trace_parent: bool = Field(default=True, validation_alias="WORKER_TRACE_PARENT")
    # The event loop (loops.py): uvloop when installed (auto), or insisted on, or never.
    event_loop: EventLoop = Field(default="auto", validation_alias="WORKER_EVENT_LOOP")

    db_pool_size: int | None = Field(default=None, ge=1, le=100_000, validation_alias="DB_POOL_SIZE")
    database_url: SecretStr | None = Field(default=None, validation_alias="DATABASE_URL")
    service_name: str = Field(default="sqs-worker", min_length=1, validation_alias="OTEL_SERVICE_NAME")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(default="INFO", validation_alias="LOG_LEVEL")
    log_payloads: bool = Field(default=False, validation_alias="LOG_PAYLOADS")
    # JSON lines for log pipelines (the default, as deployed); text lines for a person at a
    # terminal (`make dev`). logs.py.
    log_format: Literal["json", "text"] = Field(default="json", validation_alias="LOG_FORMAT")

    aws_region: str = Field(
        default="us-east-1",
        pattern=r"^[a-z]{2}(-[a-z]+)+-\d+$",
        validation_alias=AliasChoices("AWS_REGION", "AWS_DEFAULT_REGION"),
    )
    aws_endpoint_url: str | None = Field(default=None, validation_alias="AWS_ENDPOINT_URL")

    @field_validator("queues", mode="before")
    @classmethod
    def _split_queues(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("queues")
    @classmethod
    def _check_queues(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("name at least one queue, e.g. WORKER_QUEUES=orders,receipts")
        for name in value:
            if not QUEUE_NAME_RE.match(name):
                raise ValueError(f"{name!r} is not a valid SQS queue name (1-80 of A-Z a-z 0-9 - _, optional .fifo)")
        if len(set(value)) != len(value):
            raise ValueError("a queue is listed twice")
        # Per-queue settings name a queue by its key: two queues with one key would share
        # (or silently split) every WORKER_QUEUE_<KEY>_* override.
        named: dict[str, str] = {}
        for name in value:
            key = queue_env_key(name)
            if key in named:
                raise ValueError(
                    f"{named[key]!r} and {name!r} have the same per-queue key {key} "
                    f"(WORKER_QUEUE_{key}_*): rename one of the queues"
                )
            named[key] = name
        return value

    @field_validator("*", mode="before")
    @classmethod
    def _whole_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # Every whole-number setting is read by the one reader per-queue settings use.
        if info.field_name in _WHOLE_NUMBER_FIELDS and isinstance(value, str):
            try:
                return whole_number(value)
            except ValueError:
                raise PydanticCustomError("whole_number", NOT_WHOLE) from None
        return value

    @field_validator("priority", mode="before")
    @classmethod
    def _check_priority(cls, value: Any) -> Any:
        if value == "":
            return None
        if value is not None and value not in PRIORITIES:
            raise ValueError(f"{value!r} is not a priority: use {' or '.join(PRIORITIES)}")
        return value

    @field_validator("event_loop")
    @classmethod
    def _check_event_loop(cls, value: EventLoop) -> EventLoop:
        problem = loop_problem(value, uvloop_installed())
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("metrics_exporter")
    @classmethod
    def _check_exporter(cls, value: str) -> str:
        # Accepted without the SDK, `run` pushed nothing: refused here instead.
        problem = exporter_problem(value, value == "prometheus" or otlp_installed())
        if problem:
            raise PydanticCustomError("otlp_extra", problem)
        return value

    @field_validator("rate_limit")
    @classmethod
    def _check_rate(cls, value: str | None) -> str | None:
        if value in (None, ""):
            return None
        rate_per_second(value)  # ValueError names the form or the floor
        return value

    @field_validator("large_payload_bucket", mode="before")
    @classmethod
    def _no_bucket(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("large_payload_read_buckets", mode="before")
    @classmethod
    def _split_buckets(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("large_payload_read_buckets")
    @classmethod
    def _check_buckets(cls, value: list[str]) -> list[str]:
        for name in value:
            if not re.fullmatch(BUCKET_NAME, name):
                raise ValueError(f"{name!r} is not an S3 bucket name (3-63 of a-z 0-9 . -)")
        return value

    @field_validator("aws_endpoint_url", "ecs_agent_uri")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value in (None, ""):
            return None
        problem = http_url_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: SecretStr | None) -> SecretStr | None:
        # Readiness connects to its host and port: a port that is not one fails at boot.
        if value is not None and "://" in value.get_secret_value():
            try:
                urlsplit(value.get_secret_value()).port  # noqa: B018 - raises ValueError for a bad port
            except ValueError:
                raise ValueError("the port in the URL is not a number within 0-65535") from None
        return value

    @field_validator("handlers")
    @classmethod
    def _check_handlers(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", value):
            raise ValueError(f"{value!r} must look like package.module:attribute (the Router the worker serves)")
        return value

    @property
    def job_timeout(self) -> float:
        return self.job_timeout_ms / 1000

    @property
    def shutdown_timeout(self) -> float:
        return self.shutdown_timeout_ms / 1000


@dataclass(frozen=True)
class QueueSettings:
    """What one queue's pool runs with, after per-queue overrides."""

    name: str
    url: str | None
    concurrency: int
    job_timeout_ms: int
    visibility_timeout_seconds: int
    pollers: int
    rate_limit: float | None = None  # jobs started per second (WORKER_[QUEUE_<KEY>_]RATE_LIMIT)
    rate_burst: int = 1  # starts the rate limit lets go together (WORKER_[QUEUE_<KEY>_]RATE_BURST)
    group_concurrency: int | None = None  # jobs of one group at once (WORKER_[QUEUE_<KEY>_]GROUP_CONCURRENCY)
    prefetch: int = 0  # most messages held beyond the concurrency (WORKER_[QUEUE_<KEY>_]PREFETCH)
    adaptive: bool = False  # the concurrency is a ceiling (WORKER_[QUEUE_<KEY>_]ADAPTIVE_CONCURRENCY)
    concurrency_floor: int = 1  # the adaptive limit's floor (WORKER_[QUEUE_<KEY>_]CONCURRENCY_FLOOR)
    weight: int = 1  # its share of the shared budget under weighted priority (WORKER_QUEUE_<KEY>_WEIGHT)

    @property
    def fifo(self) -> bool:
        return self.name.endswith(".fifo")

    @property
    def job_timeout(self) -> float:
        return self.job_timeout_ms / 1000


@dataclass(frozen=True)
class WorkerConfig:
    """Settings plus the resolved per-queue view: everything the runtime reads."""

    settings: Settings
    queues: tuple[QueueSettings, ...]
    service: ServiceDefaults = field(default_factory=lambda: ServiceDefaults())
    own: BaseSettings | None = None  # the service's own settings, validated (ServiceDefaults.settings)
    secrets: Mapping[str, bool] = field(default_factory=dict)  # the owner's secrets: is each set

    @property
    def stalled_after(self) -> float:
        """Liveness threshold: longer than any job may legitimately hold every slot."""
        if self.settings.stalled_after_seconds is not None:
            return self.settings.stalled_after_seconds
        return max(q.job_timeout for q in self.queues) + 60

    @property
    def priority(self) -> Priority | None:
        """How a shared budget's slots are given (None: no shared budget)."""
        if self.settings.shared_concurrency is None:
            return None
        return self.settings.priority or "weighted"

    @property
    def health_file(self) -> str:
        return self.settings.health_file or default_health_file(self.settings.service_name)

    def describe(self) -> dict[str, Any]:
        """The effective configuration as printed at start-up and by `config`; secrets redacted."""
        data = self.settings.model_dump(mode="json", by_alias=False)
        if self.settings.database_url is not None:
            data["database_url"] = redact_url(self.settings.database_url.get_secret_value())
        if self.settings.aws_endpoint_url:
            data["aws_endpoint_url"] = redact_url(self.settings.aws_endpoint_url)
        if self.settings.ecs_agent_uri:
            data["ecs_agent_uri"] = redact_url(self.settings.ecs_agent_uri)
        data["queues"] = [
            {
                "name": q.name,
                "url": q.url,
                "concurrency": q.concurrency,
                "job_timeout_ms": q.job_timeout_ms,
                "visibility_timeout_seconds": q.visibility_timeout_seconds,
                "pollers": q.pollers,
                "rate_limit_per_second": q.rate_limit,
                "rate_burst": q.rate_burst,
                "group_concurrency": q.group_concurrency,
                "prefetch": q.prefetch,
                "adaptive_concurrency": q.adaptive,
                "concurrency_floor": q.concurrency_floor,
                "weight": q.weight,
                "fifo": q.fifo,
            }
            for q in self.queues
        ]
        data["priority"] = self.priority
        data["secrets"] = {name: "set" if given else "unset" for name, given in self.secrets.items()}
        data["stalled_after_seconds"] = self.stalled_after
        data["health_file"] = self.health_file
        if self.own is not None:
            data["service_settings"] = self.own.model_dump(mode="json")  # SecretStr shows as ********
        return data

    def summary(self) -> dict[str, Any]:
        """What the start and stop log lines carry: the settings that differ from the
        engine's defaults (redacted as in `describe`), and each queue's name with what it
        sets apart from the process-wide settings. `config` prints all of it."""
        described = self.describe()
        own = self.settings.model_dump(mode="json", by_alias=False)
        # Each line says its worker id and service already; the queues come next, per queue.
        said = ("queues", "worker_id", "service_name")
        defaults = _DEFAULTS.model_dump(mode="json", by_alias=False)
        data = {key: described[key] for key, value in defaults.items() if key not in said and own[key] != value}
        process_wide = {
            "concurrency": self.settings.concurrency,
            "job_timeout_ms": self.settings.job_timeout_ms,
            "visibility_timeout_seconds": self.settings.visibility_timeout_seconds,
            "group_concurrency": self.settings.group_concurrency,
            "adaptive_concurrency": self.settings.adaptive_concurrency,
            "concurrency_floor": self.settings.concurrency_floor,
            "weight": 1,
            "url": None,
            "rate_limit_per_second": None,
        }
        data["queues"] = [
            {"name": queue["name"]}
            | {key: queue[key] for key, usual in process_wide.items() if queue[key] != usual and queue[key] is not None}
            for queue in described["queues"]
        ]
        return data


def default_health_file(service_name: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", service_name)
    return os.path.join(os.environ.get("TMPDIR", "/tmp"), f"{safe}.progress")  # noqa: S108 - a tmpfs/emptyDir in containers


# Connection parameters whose values are shown (`?sslmode=require`, `host=db`): names that
# never hold a secret. Any other parameter's value is hidden, whatever it is called (`auth`,
# `sig`, `X-Amz-Credential`...): a list of secret names would miss the next one.
SAFE_PARAMETERS = frozenset(
    {
        "host",
        "hostaddr",
        "port",
        "dbname",
        "database",
        "server",
        "user",
        "username",
        "sslmode",
        "connect_timeout",
        "application_name",
        "target_session_attrs",
        "region",
    }
)
# `name=value` in a query string, a libpq keyword DSN or `Name=value;` (quoted or not).
_PARAMETER = re.compile(r"""([A-Za-z_][\w.-]*)(\s*=\s*)('[^']*'|"[^"]*"|[^&;\s]*)""")


def _hide_parameter(match: re.Match[str]) -> str:
    name, equals, value = match.groups()
    return match.group(0) if name.lower() in SAFE_PARAMETERS or not value else f"{name}{equals}***"


def redact_url(url: str) -> str:
    """Hide the secrets in a URL or connection string, keep the rest for debugging: the
    userinfo password (also inside jdbc:...), whatever characters it holds, and the value of
    every parameter not in SAFE_PARAMETERS."""
    if "://" not in url:
        return _PARAMETER.sub(_hide_parameter, url)  # a keyword DSN: `host=db password=...`
    scheme, sep, rest = url.partition("://")
    # The userinfo ends at the last "@": a password may hold "/", "?", "#" or "@" unescaped
    # (drivers accept them), so the URL parser's idea of the host is not trusted here.
    userinfo, at, host = rest.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        rest = f"{user}:***@{host}" if colon else rest
    base, question, query = rest.partition("?")
    return scheme + sep + base + question + _PARAMETER.sub(_hide_parameter, query)


def http_url_problem(value: str) -> str | None:
    """Why `value` is not a usable http(s) URL, or None."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number within 0-65535
    except ValueError as exc:
        return f"{redact_url(value)!r} is not a valid URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{redact_url(value)!r} is not an http(s) URL"
    return None


def queue_env_key(name: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def whole_number(text: str) -> int:
    """A whole-number setting's value (global or per queue): plain digits 0-9, a leading
    minus allowed so that the range check can name it; ValueError for anything else."""
    if not _WHOLE.fullmatch(text):
        raise ValueError(NOT_WHOLE)
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("-").lstrip("0") or "0"
    if len(digits) > _WHOLE_DIGITS:
        return sign * _BEYOND_ANY_BOUND
    return sign * int(digits)


def rate_per_second(text: str) -> float:
    """A rate-limit setting's value in starts a second (WORKER_RATE_LIMIT, per queue too):
    throttle.parse_rate's forms in digits 0-9, finite, and at least MIN_RATE_PER_SECOND."""
    if not text.isascii():
        raise ValueError(f"{text!r} is not a rate: write it in digits 0-9 as N/s, N/min or N/h (e.g. 50/s)")
    per_second = parse_rate(text)
    if not math.isfinite(per_second):
        raise ValueError(f"{text[:40]!r}... is not a finite rate")
    if per_second < MIN_RATE_PER_SECOND:
        raise ValueError(
            f"{text!r} is below the slowest rate limit, one start a day (0.0417/h): a queue this slow "
            "would in effect never start again; to stop a queue, leave it out of WORKER_QUEUES"
        )
    return per_second


def load_settings(
    environ: Mapping[str, str] | None = None, service: ServiceDefaults | None = None, *, own: bool = True
) -> WorkerConfig:
    """Read and validate everything (`environ`, default os.environ, over the service's
    defaults); raise ConfigError naming every bad variable. `own=False`: the service's own
    settings are not read (commands that only talk to SQS: `send`, `bootstrap`, the DLQ
    tools; `WorkerConfig.own` is then None)."""
    service = service or ServiceDefaults()
    given = os.environ if environ is None else environ
    env = _environment(given, service)
    # Service links are none of the engine's settings, whatever their names; a service's own
    # settings do see them (it may read a link it names on purpose, MYDB_SERVICE_HOST).
    ours = {var: value for var, value in env.items() if not service_link(var, value)}
    # A misspelt variable would otherwise be ignored without a word, and its default used.
    problems: list[tuple[str, str]] = [(var, unknown_setting(var)) for var in sorted(ours) if _is_unknown(var)]
    values: dict[str, Any] = {k: v for k, v in ours.items() if k in _ALIASES}
    values.setdefault("OTEL_SERVICE_NAME", service.name)
    owners: BaseSettings | None = None
    if service.settings is not None and own:  # the service's own, named in the same refusal
        owners, refused = _own_settings(service.settings, env)
        problems += refused
    try:
        settings = Settings.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(problems + _explain(exc, ours)) from None

    overrides = _queue_overrides(ours, settings, problems)
    shared = settings.shared_concurrency
    if shared is None and settings.priority is not None:
        problems.append(
            ("WORKER_PRIORITY", "chooses how a shared budget's slots are given: set WORKER_SHARED_CONCURRENCY")
        )
    # With a shared budget a queue may take all of it unless its own concurrency (or one the
    # environment sets for every queue) caps it lower; a service's default does not.
    base_concurrency = settings.concurrency if shared is None or "WORKER_CONCURRENCY" in given else shared
    queues = [
        _QueueReader(name, overrides[name], settings, problems).read(base_concurrency) for name in settings.queues
    ]
    _check_timeouts(settings, queues, overrides, problems)
    _check_capacity(settings, queues, problems)
    secrets = {name: bool(env.get(name)) for name in service.secrets}
    config = WorkerConfig(settings, tuple(queues), service, owners, secrets)
    _check_stall_threshold(settings, queues, problems)
    if problems:
        raise ConfigError(problems)
    return config


def _environment(given: Mapping[str, str], service: ServiceDefaults) -> dict[str, str]:
    """The environment over the service's defaults."""
    defaults = dict(service.environ)
    if "AWS_DEFAULT_REGION" in given:
        defaults.pop("AWS_REGION", None)  # a region the environment gives beats the service's default
    return {**defaults, **given}


def _queue_overrides(
    env: Mapping[str, str], settings: Settings, problems: list[tuple[str, str]]
) -> dict[str, dict[str, str]]:
    """Each queue's WORKER_QUEUE_<KEY>_<SETTING> values, by queue name; the ones naming no
    queue, or no setting, are problems."""
    by_key = {queue_env_key(name): name for name in settings.queues}
    overrides: dict[str, dict[str, str]] = {name: {} for name in settings.queues}
    for var, value in env.items():
        if not var.startswith(QUEUE_OVERRIDE_PREFIX):
            continue
        rest = var[len(QUEUE_OVERRIDE_PREFIX) :]
        # GROUP_CONCURRENCY ends in CONCURRENCY: of the readings, the one naming a queue wins.
        readings = [(rest[: -len(s) - 1], s) for s in QUEUE_OVERRIDES if rest.endswith("_" + s)]
        known = [(k, s) for k, s in readings if k in by_key]
        if not readings:
            known_vars = [f"{QUEUE_OVERRIDE_PREFIX}{k}_{s}" for k in by_key for s in QUEUE_OVERRIDES]
            close = difflib.get_close_matches(var, known_vars, n=1, cutoff=0.8)
            hint = f"; did you mean {close[0]}?" if close else ""
            problems.append((var, f"unknown per-queue setting; use one of {', '.join(QUEUE_OVERRIDES)}{hint}"))
            continue
        if len(known) > 1:
            problems.append((var, f"ambiguous: names {' and '.join(f'{s} of {by_key[k]}' for k, s in known)}"))
            continue
        # Naming no queue: the longest setting read is the one meant (X_GROUP_CONCURRENCY: X's cap).
        key, setting = known[0] if known else max(readings, key=lambda r: len(r[1]))
        if key not in by_key:
            problems.append((var, f"no queue with key {key!r} in WORKER_QUEUES ({', '.join(settings.queues)})"))
            continue
        overrides[by_key[key]][setting] = value
    return overrides


class _QueueReader:
    """One queue's settings: its overrides over the worker-wide values, each problem
    named by the variable that made it (in the order the checks run)."""

    def __init__(self, name: str, own: Mapping[str, str], settings: Settings, problems: list[tuple[str, str]]):
        self.name = name
        self.own = own
        self.settings = settings
        self.problems = problems
        self.prefix = f"{QUEUE_OVERRIDE_PREFIX}{queue_env_key(name)}_"

    def number(self, setting: str, default: int, low: int, high: int) -> int:
        return _int(self.own, setting, self.prefix, default, low, high, self.problems)

    def refuse(self, var: str, problem: str) -> None:
        self.problems.append((var, problem))

    def read(self, base_concurrency: int) -> QueueSettings:
        own, prefix, settings = self.own, self.prefix, self.settings
        concurrency = self.number("CONCURRENCY", base_concurrency, 1, 1000)
        weight = self._weight()
        job_timeout_ms = self.number("JOB_TIMEOUT_MS", settings.job_timeout_ms, 100, MAX_VISIBILITY_SECONDS * 1000)
        visibility = self.number(
            "VISIBILITY_TIMEOUT_SECONDS", settings.visibility_timeout_seconds, 2, MAX_VISIBILITY_SECONDS
        )
        default_ahead = default_prefetch(concurrency) if settings.prefetch is None else settings.prefetch
        prefetch = self.number("PREFETCH", default_ahead, 0, 10_000)
        pollers = self._pollers(concurrency, prefetch)
        url = own.get("URL") or None
        if url is not None and http_url_problem(url):
            self.refuse(prefix + "URL", f"{redact_url(url)!r} is not a queue URL")
        rate, burst = self._rate()
        # FIFO runs one job per group anyway; at or above the concurrency the cap never bites.
        group_cap = self.number("GROUP_CONCURRENCY", settings.group_concurrency or 0, 1, 1000) or None
        if self.name.endswith(".fifo") or (group_cap is not None and group_cap >= concurrency):
            group_cap = None
        adaptive, least = self._adaptive(concurrency)
        return QueueSettings(
            self.name,
            url,
            concurrency,
            job_timeout_ms,
            visibility,
            pollers,
            rate,
            burst,
            group_cap,
            prefetch,
            adaptive,
            least,
            weight,
        )

    def _weight(self) -> int:
        weight = self.number("WEIGHT", 1, 1, 1000)
        if "WEIGHT" in self.own and self.settings.shared_concurrency is None:
            self.refuse(
                self.prefix + "WEIGHT", "a weight is a share of a shared budget: set WORKER_SHARED_CONCURRENCY too"
            )
        elif "WEIGHT" in self.own and self.settings.priority == "strict":
            self.refuse(
                self.prefix + "WEIGHT",
                "strict priority reads no weights (the order of WORKER_QUEUES decides): "
                "drop it, or set WORKER_PRIORITY=weighted",
            )
        return weight

    def _pollers(self, concurrency: int, prefetch: int) -> int:
        # One long poll returns at most 10 messages, so a pool needs ceil(places / 10)
        # pollers to keep every place filled (the concurrency, plus the prefetch).
        # Each poller holds a connection; past MAX_POLLERS the default is refused, not clamped,
        # naming what made it (a typo such as WORKER_PREFETCH=10000 would otherwise open 1,001).
        places = concurrency + prefetch
        needed = math.ceil(places / MAX_RECEIVE_BATCH)
        if not self.settings.pollers and "POLLERS" not in self.own and needed > MAX_POLLERS:
            self.refuse(
                self.prefix + "PREFETCH" if "PREFETCH" in self.own else "WORKER_PREFETCH",
                f"concurrency {concurrency} + prefetch {prefetch} would need {needed} pollers, more than "
                f"{MAX_POLLERS}: lower the prefetch (or the concurrency), or set WORKER_POLLERS",
            )
            needed = MAX_POLLERS
        return self.number("POLLERS", self.settings.pollers or needed, 1, MAX_POLLERS)

    def _rate(self) -> tuple[float | None, int]:
        """The rate limit (starts a second) and its burst."""
        rate_text = self.own.get("RATE_LIMIT", self.settings.rate_limit or "")
        rate: float | None = None
        if rate_text:
            try:
                rate = rate_per_second(rate_text)
            except ValueError as exc:
                self.refuse(self.prefix + "RATE_LIMIT", str(exc))
        burst = self.number("RATE_BURST", self.settings.rate_burst or 1, 1, 1_000_000)
        burst_var = self.prefix + "RATE_BURST" if "RATE_BURST" in self.own else "WORKER_RATE_BURST"
        if burst > 1 and not rate_text:
            self.refuse(burst_var, "a burst is of a rate limit: set WORKER_RATE_LIMIT too")
        elif rate is not None and burst > window_of(rate)[0]:
            self.refuse(
                burst_var, f"{burst} is more starts at once than {rate_text} allows in a window ({window_of(rate)[0]})"
            )
        return rate, burst

    def _adaptive(self, concurrency: int) -> tuple[bool, int]:
        """Whether the concurrency adapts, and its floor."""
        own, prefix = self.own, self.prefix
        adaptive = _bool(own, "ADAPTIVE_CONCURRENCY", prefix, self.settings.adaptive_concurrency, self.problems)
        least = self.number("CONCURRENCY_FLOOR", self.settings.concurrency_floor, 1, 1000)
        if adaptive and least > concurrency:
            names = [prefix + s if s in own else "WORKER_" + s for s in ("CONCURRENCY_FLOOR", "CONCURRENCY")]
            self.refuse(
                names[0],
                f"the adaptive concurrency's floor {least} is above {self.name}'s concurrency {concurrency} "
                f"({names[1]}, the ceiling)",
            )
        return adaptive, least


def _check_timeouts(
    settings: Settings,
    queues: list[QueueSettings],
    overrides: Mapping[str, Mapping[str, str]],
    problems: list[tuple[str, str]],
) -> None:
    """Each queue's visibility timeout leaves the heartbeat room, and its job timeout ends
    before the shutdown timeout; the retry backoff's bounds are in order."""
    for q in queues:
        heartbeat = heartbeat_problem(q.visibility_timeout_seconds, settings.heartbeat_fraction)
        if heartbeat is not None:
            overridden = "VISIBILITY_TIMEOUT_SECONDS" in overrides[q.name]
            var = (
                f"{QUEUE_OVERRIDE_PREFIX}{queue_env_key(q.name)}_VISIBILITY_TIMEOUT_SECONDS"
                if overridden
                else "WORKER_HEARTBEAT_FRACTION"
            )
            problems.append((var, heartbeat))
        if q.job_timeout_ms >= settings.shutdown_timeout_ms:
            var = (
                f"{QUEUE_OVERRIDE_PREFIX}{queue_env_key(q.name)}_JOB_TIMEOUT_MS"
                if "JOB_TIMEOUT_MS" in overrides[q.name]
                else "WORKER_JOB_TIMEOUT_MS"
            )
            problems.append(
                (
                    var,
                    f"job timeout {q.job_timeout_ms} ms must be below WORKER_SHUTDOWN_TIMEOUT_MS "
                    f"({settings.shutdown_timeout_ms} ms), or SIGTERM cuts running jobs off",
                )
            )
    if settings.retry_max_seconds < settings.retry_base_seconds:
        problems.append(("WORKER_RETRY_MAX_SECONDS", "must be at least WORKER_RETRY_BASE_SECONDS"))


def _check_capacity(settings: Settings, queues: list[QueueSettings], problems: list[tuple[str, str]]) -> None:
    """The database pool serves every handler that may run at once."""
    shared = settings.shared_concurrency
    total = sum(q.concurrency for q in queues)
    if shared is not None:
        total = min(total, shared)  # the queues never run more than the budget together
    if settings.db_pool_size is not None and total > settings.db_pool_size:
        what = "the shared budget" if shared is not None and total == shared else "sum of per-queue concurrency"
        lower = "WORKER_SHARED_CONCURRENCY" if shared is not None and total == shared else "WORKER_CONCURRENCY"
        problems.append(
            (
                "DB_POOL_SIZE",
                f"{settings.db_pool_size} connections cannot serve {total} concurrent handlers "
                f"({what}); lower {lower} or raise the pool",
            )
        )


def _check_stall_threshold(settings: Settings, queues: list[QueueSettings], problems: list[tuple[str, str]]) -> None:
    if settings.stalled_after_seconds is not None:
        # Progress is marked when a long poll returns and when a job ends: the threshold
        # must outlast both, or an idle or busy worker would look stalled.
        longest = max(q.job_timeout for q in queues)
        floor = max(longest, settings.wait_time_seconds + 5)
        if settings.stalled_after_seconds <= floor:
            problems.append(
                (
                    "WORKER_STALLED_AFTER_SECONDS",
                    f"must exceed {floor:g} s (the longest job timeout, and the long-poll wait plus 5 s), "
                    "or a busy or idle worker looks stalled",
                )
            )


def _int(
    own: Mapping[str, str],
    setting: str,
    prefix: str,
    default: int,
    low: int,
    high: int,
    problems: list[tuple[str, str]],
) -> int:
    raw = own.get(setting)
    if raw is None:
        return default
    try:
        value = whole_number(raw)
    except ValueError:
        problems.append((prefix + setting, f"{NOT_WHOLE} (got {raw!r})"))
        return default
    if not low <= value <= high:
        problems.append((prefix + setting, f"{value} is outside {low}..{high}"))
        return default  # not a value the checks after this one would name again
    return value


def _bool(own: Mapping[str, str], setting: str, prefix: str, default: bool, problems: list[tuple[str, str]]) -> bool:
    raw = own.get(setting)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word not in TRUE_WORDS | FALSE_WORDS:
        problems.append((prefix + setting, f"{raw!r} is not true or false"))
        return default
    return word in TRUE_WORDS


# The engine's own defaults, for what a configuration sets apart from them (`summary`).
_DEFAULTS = Settings.model_construct()
_ALIASES: dict[str, str] = {}
for _name, _field in Settings.model_fields.items():
    _alias = _field.validation_alias
    for _choice in _alias.choices if isinstance(_alias, AliasChoices) else [_alias]:
        if isinstance(_choice, str):
            _ALIASES[_choice] = _name


# The settings read as whole numbers (whole_number), by their annotation: int, or int | None.
_WHOLE_NUMBER_FIELDS = frozenset(name for name, f in Settings.model_fields.items() if f.annotation in (int, int | None))


def _is_unknown(var: str) -> bool:
    """A WORKER_ variable the engine does not read (per-queue ones are checked by name later)."""
    return var.startswith("WORKER_") and var not in _ALIASES and not var.startswith(QUEUE_OVERRIDE_PREFIX)


def unknown_setting(var: str) -> str:
    """What to say about an unknown WORKER_ variable: the closest known one, if any is close."""
    known = [alias for alias in _ALIASES if alias.startswith("WORKER_")]
    close = difflib.get_close_matches(var, known, n=1, cutoff=0.75)
    if close:
        return f"unknown setting; did you mean {close[0]}?"
    return "unknown setting (the README's Configuration lists them; per queue: WORKER_QUEUE_<KEY>_<SETTING>)"


def own_variables(model: type[BaseSettings] | None) -> dict[str, str]:
    """The variables a service's own settings read, each to the key it is validated under:
    its validation_alias, else the env_prefix and the field's name in upper case."""
    if model is None:
        return {}
    prefix = str(model.model_config.get("env_prefix") or "")
    variables: dict[str, str] = {}
    for name, info in model.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            variables.update({choice: choice for choice in alias.choices if isinstance(choice, str)})
        elif isinstance(alias, str):
            variables[alias] = alias
        else:
            variables[(prefix + name).upper()] = name
    return variables


def _reads(info: Any, name: str, key: str) -> bool:
    """The field `name` is the one validated under `key` (its name, or one of its aliases)."""
    alias = info.validation_alias
    return key == name or key in (alias.choices if isinstance(alias, AliasChoices) else [alias])


def _own_settings(
    model: type[BaseSettings], env: Mapping[str, str]
) -> tuple[BaseSettings | None, list[tuple[str, str]]]:
    """The service's own settings from `env` (and nothing else: no second reading of the
    process's environment), or the problems, each named by its variable."""
    variables = own_variables(model)
    keys = {key: var for var, key in variables.items()}
    try:
        return model.model_validate({key: env[var] for var, key in variables.items() if var in env}), []
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = str(err["loc"][0]) if err["loc"] else "?"
            var = keys.get(key, key)
            annotation = str(next((f.annotation for n, f in model.model_fields.items() if _reads(f, n, key)), ""))
            secret = "Secret" in annotation or "Url" in annotation  # never shown, as a URL's password
            raw = env.get(var)
            shown = "" if raw is None or secret or "URL" in var else f" (got {raw!r})"
            problems.append((var, f"{err['msg']}{shown}"))
        return None, problems


def _explain(exc: ValidationError, env: Mapping[str, str]) -> list[tuple[str, str]]:
    problems = []
    for err in exc.errors():
        loc = str(err["loc"][0]) if err["loc"] else "?"
        var = loc if loc in _ALIASES else next((a for a, n in _ALIASES.items() if n == loc), loc)
        raw = env.get(var)
        shown = "" if raw is None or "URL" in var else f" (got {raw!r})"
        problems.append((var, f"{err['msg']}{shown}"))
    return problems
