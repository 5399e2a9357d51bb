"""The engine's settings, one field each: its environment variable, its default, its bounds,
and how its value is read (`whole_number`, `rate_per_second`: the same reader for a global
value and a per-queue one, queues.py); what a service tells the engine (`ServiceDefaults`)
and how a refusal is said (`ConfigError`).
"""

from __future__ import annotations

import math
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from ...base.limits import (
    LARGE_PAYLOAD_MAX_BYTES,
    MAX_QUEUE_NAME,
    MAX_VISIBILITY_SECONDS,
    MAX_WAIT_SECONDS,
    RESERVED_PREFIXES,
    SECRET_NAME_PATTERN,
)
from ...runtime.protections.budget import PRIORITIES, Priority
from ...runtime.protections.throttle import parse_rate
from ..host.loops import EventLoop, loop_problem, uvloop_installed
from ..platform.otlp_metrics import exporter_problem, otlp_installed
from .redaction import http_url_problem

# S3's rule for bucket names (the common subset: lower case, digits, dots, hyphens).
BUCKET_NAME = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
# SQS's own rule for queue names (CreateQueue API reference).
QUEUE_NAME_RE = re.compile(rf"^(?=.{{1,{MAX_QUEUE_NAME}}}$)[A-Za-z0-9_-]+(\.fifo)?$")
MAX_POLLERS = 100  # long polls (and connections) one queue may hold open at once
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
        known = set(ALIASES) | set(own_variables(self.settings))
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
    if name.startswith(RESERVED_PREFIXES) or (name in ALIASES and name != "DATABASE_URL"):
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


# The engine's own defaults, for what a configuration sets apart from them (`summary`).
DEFAULTS = Settings.model_construct()
ALIASES: dict[str, str] = {}
for _name, _field in Settings.model_fields.items():
    _alias = _field.validation_alias
    for _choice in _alias.choices if isinstance(_alias, AliasChoices) else [_alias]:
        if isinstance(_choice, str):
            ALIASES[_choice] = _name


# The settings read as whole numbers (whole_number), by their annotation: int, or int | None.
_WHOLE_NUMBER_FIELDS = frozenset(name for name, f in Settings.model_fields.items() if f.annotation in (int, int | None))


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
