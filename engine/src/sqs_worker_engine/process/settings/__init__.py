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
Kubernetes' service links (loading.py) are dropped before any of the engine's
settings is read: whatever its name (a Service `worker-metrics` writes
WORKER_METRICS_PORT=tcp://...), a link is never a setting.

`load_settings` (loading.py, which also tells a service link from a setting) is the one
entry; a module a job: fields.py (every setting: its variable, default, bounds and reader;
`ServiceDefaults`, `ConfigError`), descriptions.py (what each setting does, for its
operators and the docs' reference), queues.py (the per-queue overrides), checks.py (the
checks across settings), config.py (`WorkerConfig`, and how it is told: `describe`,
`summary`), redaction.py (what may be shown of a URL).
"""

from .config import WorkerConfig
from .fields import ConfigError, ServiceDefaults, Settings, queue_env_key
from .loading import load_settings
from .queues import QueueSettings

__all__ = [
    "ConfigError",
    "QueueSettings",
    "ServiceDefaults",
    "Settings",
    "WorkerConfig",
    "load_settings",
    "queue_env_key",
]
