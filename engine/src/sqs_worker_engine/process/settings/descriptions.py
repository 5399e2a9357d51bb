"""What each setting does, told to the person operating a service: the operator-facing
text of every field of `Settings` (fields.py), keyed by its environment variable (the first,
for a field read from several). It is each field's `description`, and so the source of the
docs site's settings reference (docs/reference/settings.md, written by
scripts/docs_reference.py from the fields' descriptions).

A table of its own, so that the rules of a field (its variable, default, bounds and
reader) read on one line in fields.py, and so that fields.py and `Settings` stay within the
engine's size caps. fields.py's `setting()` looks a field's text up here: a setting without
one is a KeyError at import, never a blank cell in the reference.
"""

DESCRIPTIONS: dict[str, str] = {
    "WORKER_QUEUES": (
        "The SQS queues this process serves, as comma-separated names, each with its own pool and a handler in "
        "the Router. Required: with none the worker refuses to start (a generated service defaults to the "
        "queue it was generated with)."
    ),
    "WORKER_CONCURRENCY": (
        "Handlers running at once per queue in each worker process (with adaptive concurrency, the most it "
        "may run). With `WORKER_SHARED_CONCURRENCY` and this variable unset, each queue may take the whole "
        "shared budget."
    ),
    "WORKER_JOB_TIMEOUT_MS": (
        "Milliseconds a job may run before it is cancelled and retried as a timeout (the default is one "
        "minute); it must be below `WORKER_SHUTDOWN_TIMEOUT_MS`."
    ),
    "WORKER_SHUTDOWN_TIMEOUT_MS": (
        "Milliseconds the worker process gives its running jobs to finish after SIGTERM, receiving nothing "
        "more, before it cancels them and releases their messages (the default is 90 s). It must exceed every "
        "job timeout and stay below the platform's grace period."
    ),
    "WORKER_VISIBILITY_TIMEOUT_SECONDS": (
        "Seconds of a message's lease (its SQS visibility timeout), asked for on receive and again at each "
        "extension while its job runs: a message whose worker dies is visible again within this long. "
        "`bootstrap` also sets it as the queue's VisibilityTimeout."
    ),
    "WORKER_HEARTBEAT_FRACTION": (
        "The fraction of the visibility timeout after which a running job's lease is extended by another "
        "visibility timeout (the default 0.5: halfway through)."
    ),
    "WORKER_WAIT_TIME_SECONDS": (
        "Seconds a receive waits on an empty queue (SQS's long poll; the default 20 makes the fewest calls); "
        "0 short-polls, pausing 1 s whenever the queue answers empty."
    ),
    "WORKER_POLLERS": (
        "Receives each queue keeps in flight while it has work, each holding a connection; 0 (the default) "
        "sizes it to (concurrency + prefetch) / 10 rounded up. On an empty queue only the first keeps "
        "long-polling."
    ),
    "WORKER_DRAIN_POLLS": (
        "`true`: on shutdown, wait out the long polls still waiting on an empty queue (up to "
        "`WORKER_WAIT_TIME_SECONDS`), so that no message arriving during the stop is held back. `false` (the "
        "default): cancel them and exit at once; such a poll may still take one arriving message and hide it "
        "for a visibility timeout."
    ),
    "WORKER_RETRY_BASE_SECONDS": (
        "Seconds of the retry backoff's first step: a failed job's first retry waits between half of it and "
        "all of it, each later retry a step twice as long, up to `WORKER_RETRY_MAX_SECONDS`. A delay the "
        "handler asks for (`RetryLater`) replaces it."
    ),
    "WORKER_RETRY_MAX_SECONDS": (
        "Seconds the retry backoff's step grows to at most (the default is five minutes), and the longest a "
        "queue pauses after repeated `DownstreamUnavailable`; at least `WORKER_RETRY_BASE_SECONDS`."
    ),
    "WORKER_ACK_FLUSH_MS": (
        "Milliseconds a delete or a visibility change may wait for others of its queue to share one batch "
        "call; ten waiting go at once."
    ),
    "WORKER_MAX_RECEIVE_COUNT": (
        "Receives before SQS moves a message to its dead-letter queue, as `bootstrap` writes it into each "
        "queue's RedrivePolicy; a running worker reads the queue's own RedrivePolicy instead."
    ),
    "WORKER_PROCESS_POOL_SIZE": (
        'Processes that run the handlers declared with `executor="process"`, one pool a worker process, '
        "started only when such a handler exists; 0 (the default): the machine's CPU count."
    ),
    "WORKER_HANDLERS": (
        "Where the Router the worker serves lives, as `package.module:attribute`. Unset: a generated service "
        "names its own, and the engine run alone refuses the commands that need handlers."
    ),
    "WORKER_ID": (
        "This worker's id in its logs, events and `worker_info` metric; the default is the host name (on "
        "Kubernetes, the pod's name)."
    ),
    "WORKER_METRICS_HOST": (
        "The address the HTTP server of `/metrics`, `/livez` and `/readyz` listens on; the default 0.0.0.0 "
        "takes connections on every interface, so that it is reached from outside the container."
    ),
    "WORKER_METRICS_PORT": "The port of the HTTP server of `/metrics`, `/livez` and `/readyz`; 0 turns the server off.",
    "WORKER_METRICS_EXPORTER": (
        "Where metrics go: `prometheus` (the default) serves them at `/metrics`; `otlp` pushes them over "
        "OTLP/HTTP to `OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT` under the same names, with no `/metrics`; "
        "`both` does both. The last two refuse to start without the engine's `otlp` extra."
    ),
    "WORKER_STALLED_AFTER_SECONDS": (
        "Seconds without progress (a long poll answering, a job ending) after which the worker counts as "
        "stalled: `/livez` answers 503 and `healthcheck` fails. Unset: the longest job timeout plus 60 s; a "
        "value set must exceed both the longest job timeout and the long-poll wait plus 5 s."
    ),
    "WORKER_HEALTH_FILE": (
        "The file each worker process writes its progress to, with its pid before the suffix, and "
        "`healthcheck` reads; empty (the default): `$TMPDIR/<service>.progress`, named after "
        "`OTEL_SERVICE_NAME`."
    ),
    "WORKER_BACKLOG_SAMPLE_SECONDS": (
        "Seconds between two samples of each queue's depth and oldest message's age for the metrics (one "
        "GetQueueAttributes call a queue; a queue found idle and empty is not asked again until it has work)."
    ),
    "WORKER_SCALE_IN_PROTECTION_MINUTES": (
        "Minutes an ECS task scale-in protection lasts, renewed halfway while the worker is busy, so that a "
        "worker that dies pins its task no longer; read only on ECS (`ECS_AGENT_URI`)."
    ),
    "ECS_AGENT_URI": (
        "The ECS agent's address, which ECS sets in every task: with it the worker protects its task from "
        "scale-in while it has jobs, and lets the protection go after 10 s idle. Unset (not on ECS): no "
        "protection."
    ),
    "WORKER_LARGE_PAYLOAD_BUCKET": (
        "The S3 bucket of this service's offloaded payloads: received pointers may name it, `send` offloads "
        "large messages to it, `bootstrap` creates it, and it is the only bucket objects are deleted in. "
        "Unset: nothing is offloaded, and pointers are followed only into `WORKER_LARGE_PAYLOAD_READ_BUCKETS`."
    ),
    "WORKER_LARGE_PAYLOAD_READ_BUCKETS": (
        "Other S3 buckets, comma-separated, that received pointers may name: their objects are read, never "
        "deleted. A pointer into a bucket neither here nor in `WORKER_LARGE_PAYLOAD_BUCKET` is dead-lettered."
    ),
    "WORKER_LARGE_PAYLOAD_MAX_BYTES": (
        "The largest offloaded payload, in bytes, a job reads (the default is 4 MiB); a pointer to a larger "
        "object is dead-lettered."
    ),
    "WORKER_LARGE_PAYLOAD_THRESHOLD_BYTES": (
        "Bytes of body and attributes above which the `send` command offloads a message to "
        "`WORKER_LARGE_PAYLOAD_BUCKET`; the default, 256 KiB, is the extended clients' own."
    ),
    "WORKER_LARGE_PAYLOAD_DELETE": (
        "`true`: delete an offloaded payload's S3 object once SQS has confirmed its message's delete (only in "
        "`WORKER_LARGE_PAYLOAD_BUCKET`). `false` (the default): keep it, as the extended clients do, for the "
        "bucket's lifecycle rule to expire."
    ),
    "WORKER_SNS_VERIFY_SIGNATURES": (
        "Check each SNS notification's signature before its handler sees it: a forged or unsigned one is "
        "dead-lettered. `false` only for queues whose queue policy admits the topics alone (`aws:SourceArn`)."
    ),
    "WORKER_RATE_LIMIT": (
        "Jobs started per second per queue and process, as `N/s`, `N/min` or `N/h` (`50/s`), evenly spaced; "
        "unset: no limit but the concurrency. A fleet-wide limit is this times the replicas."
    ),
    "WORKER_RATE_BURST": (
        "Starts the rate limit lets go together, at most the rate's count in one window; unset: 1, starts "
        "evenly spaced. Only with `WORKER_RATE_LIMIT`."
    ),
    "WORKER_GROUP_CONCURRENCY": (
        "On standard queues, jobs of one message group (a tenant) running at once per queue and process; "
        "unset: no cap but the concurrency. FIFO queues run one job of a group at a time anyway."
    ),
    "WORKER_PREFETCH": (
        "Messages a queue may hold beyond its concurrency, received ahead so that a freed slot never waits "
        "for a receive; each is one more a SIGKILL leaves invisible for a visibility timeout. Unset: three "
        "times the concurrency, at least 50, at most 200 or the concurrency; 0 turns it off."
    ),
    "WORKER_ADAPTIVE_CONCURRENCY": (
        "`true`: each queue's handlers running at once follow the downstream's latency, between "
        "`WORKER_CONCURRENCY_FLOOR` and `WORKER_CONCURRENCY`, and shrink on timeouts and "
        "`DownstreamUnavailable`. `false` (the default): always the concurrency."
    ),
    "WORKER_CONCURRENCY_FLOOR": (
        "The fewest handlers running at once that adaptive concurrency keeps a queue to; at most the "
        "queue's concurrency."
    ),
    "WORKER_MAX_JOBS": (
        "Jobs (messages whose handler was called, every queue together) the process runs before it drains "
        "and exits 0, receiving nothing it will not run; unset: no limit."
    ),
    "WORKER_IDLE_EXIT_SECONDS": (
        "Seconds with nothing received, waiting or running after which the process exits 0; unset: it never "
        "exits for being idle."
    ),
    "WORKER_SHARED_CONCURRENCY": (
        "Running jobs the queues of this process share, each queue still capped by its own concurrency; "
        "unset: nothing is shared, each queue runs its own concurrency."
    ),
    "WORKER_PRIORITY": (
        "Which queue gets a freed slot of the shared budget: `weighted` (the default; in proportion to each "
        "`WORKER_QUEUE_<KEY>_WEIGHT`) or `strict` (in the order of `WORKER_QUEUES`). Only with "
        "`WORKER_SHARED_CONCURRENCY`."
    ),
    "WORKER_TRACE_PARENT": (
        "`true` (the default): each job's span is a child of the producer's, in its trace; `false`: each job "
        "has a trace of its own, linked to the producer's."
    ),
    "WORKER_EVENT_LOOP": (
        "The event loop: `auto` (the default) runs on uvloop where it is installed and on the standard loop "
        "elsewhere; `uvloop` refuses to start without it; `asyncio` never uses it."
    ),
    "DB_POOL_SIZE": (
        "Connections in the service's database pool: when set, the handlers that may run at once (every "
        "queue's concurrency, or the shared budget) must fit it or the worker refuses to start, and the "
        "`db_pool_in_use` gauge is served for the service to set. Unset: not checked."
    ),
    "DATABASE_URL": (
        "The service's database, a secret (`config` shows it redacted): when set, `/readyz` checks that a "
        "TCP connection to its host and port opens. Unset: no database check."
    ),
    "OTEL_SERVICE_NAME": (
        "The service's name in logs, traces and OTLP metrics, and in the default health file's name; the "
        "default is the service's own name (`sqs-worker` for the engine alone)."
    ),
    "LOG_LEVEL": "The lowest level logged; the AWS SDK's and aiohttp's loggers stay at `WARNING` unless this is `DEBUG`.",
    "LOG_PAYLOADS": (
        "`true`: log each job's message body as the job starts (a `job payload` line at INFO). `false` (the "
        "default): bodies, which may hold personal data, are never logged."
    ),
    "LOG_FORMAT": (
        "`json` (the default, as deployed): one JSON object a line, for a log pipeline; `text`: lines for a "
        "person at a terminal (`make dev`), with the same keys."
    ),
    "AWS_REGION": "The AWS region of the queues and buckets: `AWS_REGION`, else `AWS_DEFAULT_REGION`.",
    "AWS_ENDPOINT_URL": (
        "An endpoint standing in for AWS's (SQS, S3, SNS's signing certificates), such as LocalStack's; unset: "
        "AWS's own."
    ),
}
