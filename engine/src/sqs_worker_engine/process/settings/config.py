"""What `load_settings` returns: the settings with each queue's resolved view
(`WorkerConfig`, everything the runtime reads), and how it is told: in full by `config`
and the start-up line (`describe`, secrets redacted), in short on the start and stop lines
(`summary`: what differs from the engine's defaults)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_settings import BaseSettings

from ...runtime.protections.budget import Priority
from .fields import DEFAULTS, ServiceDefaults, Settings
from .queues import QueueSettings
from .redaction import redact_url

# Control connections a queue has beside one for each of its pollers: for its lease
# extensions, visibility changes and DLQ sends (the whole pool, before it grew with the pollers).
CONTROL_PER_QUEUE = 10


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
    def control_connections(self) -> int:
        """The control client's pool (deletes, heartbeats, visibility changes, DLQ sends):
        one connection for each poller, and CONTROL_PER_QUEUE more for each queue.

        Little's law, as for the prefetch: every receive brings up to 10 messages and every 10
        settled need one DeleteMessageBatch, whose round trip is about a receive's. So as many
        delete calls are out at once as receives are, at full speed: one for each poller. With
        a fixed 10 a queue, a delete call waited for a connection whenever more than 10 were
        out: at a 30 ms round trip a queue's deletes were held to about 3,300 messages a second
        whatever its concurrency (engine/CHANGELOG.md has what the benchmark measured)."""
        return sum(q.pollers + CONTROL_PER_QUEUE for q in self.queues)

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
        defaults = DEFAULTS.model_dump(mode="json", by_alias=False)
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
