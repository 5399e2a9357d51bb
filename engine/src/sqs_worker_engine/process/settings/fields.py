"""The engine's settings, one field each: its environment variable, its default, its bounds,
what it does for the person operating a service (its `description`, from which the docs
site's settings reference is written: descriptions.py, looked up by `setting()`), and how
its value is read (`whole_number`, `rate_per_second`: the same reader for a global value and
a per-queue one, queues.py); what a service tells the engine (`ServiceDefaults`) and how a
refusal is said (`ConfigError`).
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
    RETRY_MAX_SECONDS,
    SECRET_NAME_PATTERN,
)
from ...runtime.protections.budget import PRIORITIES, Priority
from ...runtime.protections.throttle import parse_rate
from ..host.loops import EventLoop, loop_problem, uvloop_installed
from ..platform.otlp_metrics import exporter_problem, otlp_installed
from .descriptions import DESCRIPTIONS
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


def setting(variable: str, *fallbacks: str, **field: Any) -> Any:
    """A field read from the environment variable `variable` (else from the first of
    `fallbacks` set) and described by `DESCRIPTIONS[variable]`: a setting without a
    description is a KeyError at import. Every other keyword is pydantic's `Field`'s."""
    alias = AliasChoices(variable, *fallbacks) if fallbacks else variable
    return Field(validation_alias=alias, description=DESCRIPTIONS[variable], **field)


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

    queues: Annotated[list[str], NoDecode] = setting("WORKER_QUEUES", default=[], validate_default=True)
    concurrency: int = setting("WORKER_CONCURRENCY", default=8, ge=1, le=1000)
    job_timeout_ms: int = setting("WORKER_JOB_TIMEOUT_MS", default=60_000, ge=100, le=MAX_VISIBILITY_SECONDS * 1000)
    shutdown_timeout_ms: int = setting(
        "WORKER_SHUTDOWN_TIMEOUT_MS", default=90_000, ge=100, le=MAX_VISIBILITY_SECONDS * 1000
    )
    visibility_timeout_seconds: int = setting(
        "WORKER_VISIBILITY_TIMEOUT_SECONDS", default=30, ge=2, le=MAX_VISIBILITY_SECONDS
    )
    heartbeat_fraction: float = setting("WORKER_HEARTBEAT_FRACTION", default=0.5, ge=0.1, le=0.9)
    wait_time_seconds: int = setting("WORKER_WAIT_TIME_SECONDS", default=MAX_WAIT_SECONDS, ge=0, le=MAX_WAIT_SECONDS)
    pollers: int = setting("WORKER_POLLERS", default=0, ge=0, le=MAX_POLLERS)
    # A poll cancelled at shutdown keeps running inside SQS until its wait ends (SQS
    # behaviour, reported against every AWS SDK).
    drain_polls: bool = setting("WORKER_DRAIN_POLLS", default=False)
    retry_base_seconds: float = setting("WORKER_RETRY_BASE_SECONDS", default=10.0, ge=0, le=MAX_VISIBILITY_SECONDS)
    retry_max_seconds: float = setting(
        "WORKER_RETRY_MAX_SECONDS", default=RETRY_MAX_SECONDS, ge=0, le=MAX_VISIBILITY_SECONDS
    )
    ack_flush_ms: int = setting("WORKER_ACK_FLUSH_MS", default=100, ge=1, le=10_000)
    max_receive_count: int = setting("WORKER_MAX_RECEIVE_COUNT", default=5, ge=1, le=1000)
    process_pool_size: int = setting("WORKER_PROCESS_POOL_SIZE", default=0, ge=0, le=256)
    handlers: str | None = setting("WORKER_HANDLERS", default=None)
    worker_id: str = setting("WORKER_ID", default_factory=socket.gethostname, min_length=1, max_length=128)

    metrics_host: str = setting(
        "WORKER_METRICS_HOST",
        default="0.0.0.0",  # noqa: S104 - scraped from outside the container
        min_length=1,
    )
    metrics_port: int = setting("WORKER_METRICS_PORT", default=9102, ge=0, le=65535)
    # Where metrics go: otlp_metrics.py.
    metrics_exporter: Literal["prometheus", "otlp", "both"] = setting("WORKER_METRICS_EXPORTER", default="prometheus")
    # Bounded: an absurd or infinite threshold would switch liveness off without a word.
    stalled_after_seconds: float | None = setting(
        "WORKER_STALLED_AFTER_SECONDS", default=None, gt=0, le=2 * MAX_VISIBILITY_SECONDS
    )
    # The file of each process: health.progress_file.
    health_file: str = setting("WORKER_HEALTH_FILE", default="")
    backlog_sample_seconds: float = setting("WORKER_BACKLOG_SAMPLE_SECONDS", default=30.0, ge=1, le=3600)
    scale_in_protection_minutes: int = setting("WORKER_SCALE_IN_PROTECTION_MINUTES", default=5, ge=1, le=2880)
    ecs_agent_uri: str | None = setting("ECS_AGENT_URI", default=None)

    # Large payloads, in the SQS extended client's format: offload.py. A pointer is message
    # content, which whoever may send to the queue writes: it is followed only into the
    # buckets named here.
    large_payload_bucket: str | None = setting("WORKER_LARGE_PAYLOAD_BUCKET", default=None, pattern=BUCKET_NAME)
    large_payload_read_buckets: Annotated[list[str], NoDecode] = setting(
        "WORKER_LARGE_PAYLOAD_READ_BUCKETS", default=[]
    )
    large_payload_max_bytes: int = setting(
        "WORKER_LARGE_PAYLOAD_MAX_BYTES", default=LARGE_PAYLOAD_MAX_BYTES, ge=1, le=2**31
    )
    large_payload_threshold_bytes: int = setting(
        "WORKER_LARGE_PAYLOAD_THRESHOLD_BYTES", default=262_144, ge=1, le=1_048_576
    )
    large_payload_delete: bool = setting("WORKER_LARGE_PAYLOAD_DELETE", default=False)

    # signatures.py.
    sns_verify_signatures: bool = setting("WORKER_SNS_VERIFY_SIGNATURES", default=True)

    # throttle.py.
    rate_limit: str | None = setting("WORKER_RATE_LIMIT", default=None)
    rate_burst: int | None = setting("WORKER_RATE_BURST", default=None, ge=1, le=1_000_000)
    # tenants.py.
    group_concurrency: int | None = setting("WORKER_GROUP_CONCURRENCY", default=None, ge=1, le=1000)
    # prefetch.py sizes what is held within this; the default is limits.default_prefetch.
    prefetch: int | None = setting("WORKER_PREFETCH", default=None, ge=0, le=10_000)
    # adaptive.py.
    adaptive_concurrency: bool = setting("WORKER_ADAPTIVE_CONCURRENCY", default=False)
    concurrency_floor: int = setting("WORKER_CONCURRENCY_FLOOR", default=1, ge=1, le=1000)
    # Run to completion: completion.py. Process-wide, not per queue: the pod or task is what ends.
    max_jobs: int | None = setting("WORKER_MAX_JOBS", default=None, ge=1, le=1_000_000_000)
    idle_exit_seconds: float | None = setting("WORKER_IDLE_EXIT_SECONDS", default=None, gt=0, le=7 * 86_400)
    # Priorities on one budget: budget.py.
    shared_concurrency: int | None = setting("WORKER_SHARED_CONCURRENCY", default=None, ge=1, le=1000)
    priority: Priority | None = setting("WORKER_PRIORITY", default=None)
    # tracing.py.
    trace_parent: bool = setting("WORKER_TRACE_PARENT", default=True)
    # loops.py.
    event_loop: EventLoop = setting("WORKER_EVENT_LOOP", default="auto")

    db_pool_size: int | None = setting("DB_POOL_SIZE", default=None, ge=1, le=100_000)
    database_url: SecretStr | None = setting("DATABASE_URL", default=None)
    service_name: str = setting("OTEL_SERVICE_NAME", default="sqs-worker", min_length=1)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = setting("LOG_LEVEL", default="INFO")
    log_payloads: bool = setting("LOG_PAYLOADS", default=False)
    # logs.py.
    log_format: Literal["json", "text"] = setting("LOG_FORMAT", default="json")

    aws_region: str = setting(
        "AWS_REGION", "AWS_DEFAULT_REGION", default="us-east-1", pattern=r"^[a-z]{2}(-[a-z]+)+-\d+$"
    )
    aws_endpoint_url: str | None = setting("AWS_ENDPOINT_URL", default=None)

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
