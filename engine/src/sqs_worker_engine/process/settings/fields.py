"""The engine's settings, one field each: its environment variable, its default, its bounds,
what it does for the person operating a service (its `description`, from which the docs
site's settings reference is written), and how its value is read (`whole_number`,
`rate_per_second`: the same reader for a global value and a per-queue one, queues.py); what
a service tells the engine (`ServiceDefaults`) and how a refusal is said (`ConfigError`).
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

    queues: Annotated[list[str], NoDecode] = Field(
        default=[],
        validate_default=True,
        validation_alias="WORKER_QUEUES",
        description=(
            "The SQS queues this process serves, as comma-separated names, each with its own pool and a handler in "
            "the Router. Required: with none the worker refuses to start (a generated service defaults to the "
            "queue it was generated with)."
        ),
    )
    concurrency: int = Field(
        default=8,
        ge=1,
        le=1000,
        validation_alias="WORKER_CONCURRENCY",
        description=(
            "Handlers running at once per queue in each worker process (with adaptive concurrency, the most it "
            "may run). With `WORKER_SHARED_CONCURRENCY` and this variable unset, each queue may take the whole "
            "shared budget."
        ),
    )
    job_timeout_ms: int = Field(
        default=60_000,
        ge=100,
        le=MAX_VISIBILITY_SECONDS * 1000,
        validation_alias="WORKER_JOB_TIMEOUT_MS",
        description=(
            "Milliseconds a job may run before it is cancelled and retried as a timeout (the default is one "
            "minute); it must be below `WORKER_SHUTDOWN_TIMEOUT_MS`."
        ),
    )
    shutdown_timeout_ms: int = Field(
        default=90_000,
        ge=100,
        le=MAX_VISIBILITY_SECONDS * 1000,
        validation_alias="WORKER_SHUTDOWN_TIMEOUT_MS",
        description=(
            "Milliseconds the worker process gives its running jobs to finish after SIGTERM, receiving nothing "
            "more, before it cancels them and releases their messages (the default is 90 s). It must exceed every "
            "job timeout and stay below the platform's grace period."
        ),
    )
    visibility_timeout_seconds: int = Field(
        default=30,
        ge=2,
        le=MAX_VISIBILITY_SECONDS,
        validation_alias="WORKER_VISIBILITY_TIMEOUT_SECONDS",
        description=(
            "Seconds of a message's lease (its SQS visibility timeout), asked for on receive and again at each "
            "extension while its job runs: a message whose worker dies is visible again within this long. "
            "`bootstrap` also sets it as the queue's VisibilityTimeout."
        ),
    )
    heartbeat_fraction: float = Field(
        default=0.5,
        ge=0.1,
        le=0.9,
        validation_alias="WORKER_HEARTBEAT_FRACTION",
        description=(
            "The fraction of the visibility timeout after which a running job's lease is extended by another "
            "visibility timeout (the default 0.5: halfway through)."
        ),
    )
    wait_time_seconds: int = Field(
        default=MAX_WAIT_SECONDS,
        ge=0,
        le=MAX_WAIT_SECONDS,
        validation_alias="WORKER_WAIT_TIME_SECONDS",
        description=(
            "Seconds a receive waits on an empty queue (SQS's long poll; the default 20 makes the fewest calls); "
            "0 short-polls, pausing 1 s whenever the queue answers empty."
        ),
    )
    pollers: int = Field(
        default=0,
        ge=0,
        le=MAX_POLLERS,
        validation_alias="WORKER_POLLERS",
        description=(
            "Receives each queue keeps in flight while it has work, each holding a connection; 0 (the default) "
            "sizes it to (concurrency + prefetch) / 10 rounded up. On an empty queue only the first keeps "
            "long-polling."
        ),
    )
    # A poll cancelled at shutdown keeps running inside SQS until its wait ends (SQS
    # behaviour, reported against every AWS SDK).
    drain_polls: bool = Field(
        default=False,
        validation_alias="WORKER_DRAIN_POLLS",
        description=(
            "`true`: on shutdown, wait out the long polls still waiting on an empty queue (up to "
            "`WORKER_WAIT_TIME_SECONDS`), so that no message arriving during the stop is held back. `false` (the "
            "default): cancel them and exit at once; such a poll may still take one arriving message and hide it "
            "for a visibility timeout."
        ),
    )
    retry_base_seconds: float = Field(
        default=10.0,
        ge=0,
        le=MAX_VISIBILITY_SECONDS,
        validation_alias="WORKER_RETRY_BASE_SECONDS",
        description=(
            "Seconds of the retry backoff's first step: a failed job's first retry waits between half of it and "
            "all of it, each later retry a step twice as long, up to `WORKER_RETRY_MAX_SECONDS`. A delay the "
            "handler asks for (`RetryLater`) replaces it."
        ),
    )
    retry_max_seconds: float = Field(
        default=RETRY_MAX_SECONDS,
        ge=0,
        le=MAX_VISIBILITY_SECONDS,
        validation_alias="WORKER_RETRY_MAX_SECONDS",
        description=(
            "Seconds the retry backoff's step grows to at most (the default is five minutes), and the longest a "
            "queue pauses after repeated `DownstreamUnavailable`; at least `WORKER_RETRY_BASE_SECONDS`."
        ),
    )
    ack_flush_ms: int = Field(
        default=100,
        ge=1,
        le=10_000,
        validation_alias="WORKER_ACK_FLUSH_MS",
        description=(
            "Milliseconds a delete or a visibility change may wait for others of its queue to share one batch "
            "call; ten waiting go at once."
        ),
    )
    max_receive_count: int = Field(
        default=5,
        ge=1,
        le=1000,
        validation_alias="WORKER_MAX_RECEIVE_COUNT",
        description=(
            "Receives before SQS moves a message to its dead-letter queue, as `bootstrap` writes it into each "
            "queue's RedrivePolicy; a running worker reads the queue's own RedrivePolicy instead."
        ),
    )
    process_pool_size: int = Field(
        default=0,
        ge=0,
        le=256,
        validation_alias="WORKER_PROCESS_POOL_SIZE",
        description=(
            'Processes that run the handlers declared with `executor="process"`, one pool a worker process, '
            "started only when such a handler exists; 0 (the default): the machine's CPU count."
        ),
    )
    handlers: str | None = Field(
        default=None,
        validation_alias="WORKER_HANDLERS",
        description=(
            "Where the Router the worker serves lives, as `package.module:attribute`. Unset: a generated service "
            "names its own, and the engine run alone refuses the commands that need handlers."
        ),
    )
    worker_id: str = Field(
        default_factory=socket.gethostname,
        min_length=1,
        max_length=128,
        validation_alias="WORKER_ID",
        description=(
            "This worker's id in its logs, events and `worker_info` metric; the default is the host name (on "
            "Kubernetes, the pod's name)."
        ),
    )

    metrics_host: str = Field(
        default="0.0.0.0",  # noqa: S104 - scraped from outside the container
        min_length=1,
        validation_alias="WORKER_METRICS_HOST",
        description=(
            "The address the HTTP server of `/metrics`, `/livez` and `/readyz` listens on; the default 0.0.0.0 "
            "takes connections on every interface, so that it is reached from outside the container."
        ),
    )
    metrics_port: int = Field(
        default=9102,
        ge=0,
        le=65535,
        validation_alias="WORKER_METRICS_PORT",
        description="The port of the HTTP server of `/metrics`, `/livez` and `/readyz`; 0 turns the server off.",
    )
    # Where metrics go: otlp_metrics.py.
    metrics_exporter: Literal["prometheus", "otlp", "both"] = Field(
        default="prometheus",
        validation_alias="WORKER_METRICS_EXPORTER",
        description=(
            "Where metrics go: `prometheus` (the default) serves them at `/metrics`; `otlp` pushes them over "
            "OTLP/HTTP to `OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT` under the same names, with no `/metrics`; "
            "`both` does both. The last two refuse to start without the engine's `otlp` extra."
        ),
    )
    # Bounded: an absurd or infinite threshold would switch liveness off without a word.
    stalled_after_seconds: float | None = Field(
        default=None,
        gt=0,
        le=2 * MAX_VISIBILITY_SECONDS,
        validation_alias="WORKER_STALLED_AFTER_SECONDS",
        description=(
            "Seconds without progress (a long poll answering, a job ending) after which the worker counts as "
            "stalled: `/livez` answers 503 and `healthcheck` fails. Unset: the longest job timeout plus 60 s; a "
            "value set must exceed both the longest job timeout and the long-poll wait plus 5 s."
        ),
    )
    # The file of each process: health.progress_file.
    health_file: str = Field(
        default="",
        validation_alias="WORKER_HEALTH_FILE",
        description=(
            "The file each worker process writes its progress to, with its pid before the suffix, and "
            "`healthcheck` reads; empty (the default): `$TMPDIR/<service>.progress`, named after "
            "`OTEL_SERVICE_NAME`."
        ),
    )
    backlog_sample_seconds: float = Field(
        default=30.0,
        ge=1,
        le=3600,
        validation_alias="WORKER_BACKLOG_SAMPLE_SECONDS",
        description=(
            "Seconds between two samples of each queue's depth and oldest message's age for the metrics (one "
            "GetQueueAttributes call a queue; a queue found idle and empty is not asked again until it has work)."
        ),
    )
    scale_in_protection_minutes: int = Field(
        default=5,
        ge=1,
        le=2880,
        validation_alias="WORKER_SCALE_IN_PROTECTION_MINUTES",
        description=(
            "Minutes an ECS task scale-in protection lasts, renewed halfway while the worker is busy, so that a "
            "worker that dies pins its task no longer; read only on ECS (`ECS_AGENT_URI`)."
        ),
    )
    ecs_agent_uri: str | None = Field(
        default=None,
        validation_alias="ECS_AGENT_URI",
        description=(
            "The ECS agent's address, which ECS sets in every task: with it the worker protects its task from "
            "scale-in while it has jobs, and lets the protection go after 10 s idle. Unset (not on ECS): no "
            "protection."
        ),
    )

    # Large payloads, in the SQS extended client's format: offload.py. A pointer is message
    # content, which whoever may send to the queue writes: it is followed only into the
    # buckets named here.
    large_payload_bucket: str | None = Field(
        default=None,
        pattern=BUCKET_NAME,
        validation_alias="WORKER_LARGE_PAYLOAD_BUCKET",
        description=(
            "The S3 bucket of this service's offloaded payloads: received pointers may name it, `send` offloads "
            "large messages to it, `bootstrap` creates it, and it is the only bucket objects are deleted in. "
            "Unset: nothing is offloaded, and pointers are followed only into `WORKER_LARGE_PAYLOAD_READ_BUCKETS`."
        ),
    )
    large_payload_read_buckets: Annotated[list[str], NoDecode] = Field(
        default=[],
        validation_alias="WORKER_LARGE_PAYLOAD_READ_BUCKETS",
        description=(
            "Other S3 buckets, comma-separated, that received pointers may name: their objects are read, never "
            "deleted. A pointer into a bucket neither here nor in `WORKER_LARGE_PAYLOAD_BUCKET` is dead-lettered."
        ),
    )
    large_payload_max_bytes: int = Field(
        default=LARGE_PAYLOAD_MAX_BYTES,
        ge=1,
        le=2**31,
        validation_alias="WORKER_LARGE_PAYLOAD_MAX_BYTES",
        description=(
            "The largest offloaded payload, in bytes, a job reads (the default is 4 MiB); a pointer to a larger "
            "object is dead-lettered."
        ),
    )
    large_payload_threshold_bytes: int = Field(
        default=262_144,
        ge=1,
        le=1_048_576,
        validation_alias="WORKER_LARGE_PAYLOAD_THRESHOLD_BYTES",
        description=(
            "Bytes of body and attributes above which the `send` command offloads a message to "
            "`WORKER_LARGE_PAYLOAD_BUCKET`; the default, 256 KiB, is the extended clients' own."
        ),
    )
    large_payload_delete: bool = Field(
        default=False,
        validation_alias="WORKER_LARGE_PAYLOAD_DELETE",
        description=(
            "`true`: delete an offloaded payload's S3 object once SQS has confirmed its message's delete (only in "
            "`WORKER_LARGE_PAYLOAD_BUCKET`). `false` (the default): keep it, as the extended clients do, for the "
            "bucket's lifecycle rule to expire."
        ),
    )

    # signatures.py.
    sns_verify_signatures: bool = Field(
        default=True,
        validation_alias="WORKER_SNS_VERIFY_SIGNATURES",
        description=(
            "Check each SNS notification's signature before its handler sees it: a forged or unsigned one is "
            "dead-lettered. `false` only for queues whose queue policy admits the topics alone (`aws:SourceArn`)."
        ),
    )

    # throttle.py.
    rate_limit: str | None = Field(
        default=None,
        validation_alias="WORKER_RATE_LIMIT",
        description=(
            "Jobs started per second per queue and process, as `N/s`, `N/min` or `N/h` (`50/s`), evenly spaced; "
            "unset: no limit but the concurrency. A fleet-wide limit is this times the replicas."
        ),
    )
    rate_burst: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        validation_alias="WORKER_RATE_BURST",
        description=(
            "Starts the rate limit lets go together, at most the rate's count in one window; unset: 1, starts "
            "evenly spaced. Only with `WORKER_RATE_LIMIT`."
        ),
    )
    # tenants.py.
    group_concurrency: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        validation_alias="WORKER_GROUP_CONCURRENCY",
        description=(
            "On standard queues, jobs of one message group (a tenant) running at once per queue and process; "
            "unset: no cap but the concurrency. FIFO queues run one job of a group at a time anyway."
        ),
    )
    # prefetch.py sizes what is held within this; the default is limits.default_prefetch.
    prefetch: int | None = Field(
        default=None,
        ge=0,
        le=10_000,
        validation_alias="WORKER_PREFETCH",
        description=(
            "Messages a queue may hold beyond its concurrency, received ahead so that a freed slot never waits "
            "for a receive; each is one more a SIGKILL leaves invisible for a visibility timeout. Unset: three "
            "times the concurrency, at least 50, at most 200 or the concurrency; 0 turns it off."
        ),
    )
    # adaptive.py.
    adaptive_concurrency: bool = Field(
        default=False,
        validation_alias="WORKER_ADAPTIVE_CONCURRENCY",
        description=(
            "`true`: each queue's handlers running at once follow the downstream's latency, between "
            "`WORKER_CONCURRENCY_FLOOR` and `WORKER_CONCURRENCY`, and shrink on timeouts and "
            "`DownstreamUnavailable`. `false` (the default): always the concurrency."
        ),
    )
    concurrency_floor: int = Field(
        default=1,
        ge=1,
        le=1000,
        validation_alias="WORKER_CONCURRENCY_FLOOR",
        description=(
            "The fewest handlers running at once that adaptive concurrency keeps a queue to; at most the "
            "queue's concurrency."
        ),
    )
    # Run to completion: completion.py. Process-wide, not per queue: the pod or task is what ends.
    max_jobs: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000_000,
        validation_alias="WORKER_MAX_JOBS",
        description=(
            "Jobs (messages whose handler was called, every queue together) the process runs before it drains "
            "and exits 0, receiving nothing it will not run; unset: no limit."
        ),
    )
    idle_exit_seconds: float | None = Field(
        default=None,
        gt=0,
        le=7 * 86_400,
        validation_alias="WORKER_IDLE_EXIT_SECONDS",
        description=(
            "Seconds with nothing received, waiting or running after which the process exits 0; unset: it never "
            "exits for being idle."
        ),
    )
    # Priorities on one budget: budget.py.
    shared_concurrency: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        validation_alias="WORKER_SHARED_CONCURRENCY",
        description=(
            "Running jobs the queues of this process share, each queue still capped by its own concurrency; "
            "unset: nothing is shared, each queue runs its own concurrency."
        ),
    )
    priority: Priority | None = Field(
        default=None,
        validation_alias="WORKER_PRIORITY",
        description=(
            "Which queue gets a freed slot of the shared budget: `weighted` (the default; in proportion to each "
            "`WORKER_QUEUE_<KEY>_WEIGHT`) or `strict` (in the order of `WORKER_QUEUES`). Only with "
            "`WORKER_SHARED_CONCURRENCY`."
        ),
    )
    # tracing.py.
    trace_parent: bool = Field(
        default=True,
        validation_alias="WORKER_TRACE_PARENT",
        description=(
            "`true` (the default): each job's span is a child of the producer's, in its trace; `false`: each job "
            "has a trace of its own, linked to the producer's."
        ),
    )
    # loops.py.
    event_loop: EventLoop = Field(
        default="auto",
        validation_alias="WORKER_EVENT_LOOP",
        description=(
            "The event loop: `auto` (the default) runs on uvloop where it is installed and on the standard loop "
            "elsewhere; `uvloop` refuses to start without it; `asyncio` never uses it."
        ),
    )

    db_pool_size: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        validation_alias="DB_POOL_SIZE",
        description=(
            "Connections in the service's database pool: when set, the handlers that may run at once (every "
            "queue's concurrency, or the shared budget) must fit it or the worker refuses to start, and the "
            "`db_pool_in_use` gauge is served for the service to set. Unset: not checked."
        ),
    )
    database_url: SecretStr | None = Field(
        default=None,
        validation_alias="DATABASE_URL",
        description=(
            "The service's database, a secret (`config` shows it redacted): when set, `/readyz` checks that a "
            "TCP connection to its host and port opens. Unset: no database check."
        ),
    )
    service_name: str = Field(
        default="sqs-worker",
        min_length=1,
        validation_alias="OTEL_SERVICE_NAME",
        description=(
            "The service's name in logs, traces and OTLP metrics, and in the default health file's name; the "
            "default is the service's own name (`sqs-worker` for the engine alone)."
        ),
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO",
        validation_alias="LOG_LEVEL",
        description=(
            "The lowest level logged; the AWS SDK's and aiohttp's loggers stay at `WARNING` unless this is `DEBUG`."
        ),
    )
    log_payloads: bool = Field(
        default=False,
        validation_alias="LOG_PAYLOADS",
        description=(
            "`true`: log each job's message body as the job starts (a `job payload` line at INFO). `false` (the "
            "default): bodies, which may hold personal data, are never logged."
        ),
    )
    # logs.py.
    log_format: Literal["json", "text"] = Field(
        default="json",
        validation_alias="LOG_FORMAT",
        description=(
            "`json` (the default, as deployed): one JSON object a line, for a log pipeline; `text`: lines for a "
            "person at a terminal (`make dev`), with the same keys."
        ),
    )

    aws_region: str = Field(
        default="us-east-1",
        pattern=r"^[a-z]{2}(-[a-z]+)+-\d+$",
        validation_alias=AliasChoices("AWS_REGION", "AWS_DEFAULT_REGION"),
        description="The AWS region of the queues and buckets: `AWS_REGION`, else `AWS_DEFAULT_REGION`.",
    )
    aws_endpoint_url: str | None = Field(
        default=None,
        validation_alias="AWS_ENDPOINT_URL",
        description=(
            "An endpoint standing in for AWS's (SQS, S3, SNS's signing certificates), such as LocalStack's; unset: "
            "AWS's own."
        ),
    )

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
