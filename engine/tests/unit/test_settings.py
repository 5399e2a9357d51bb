"""Configuration: every bad value refuses to boot with a message naming the variable."""

from __future__ import annotations

import json

import pytest

from sqs_worker_engine.process.settings import ConfigError, ServiceDefaults, load_settings
from sqs_worker_engine.process.settings.redaction import redact_url

# A service as a generated one passes itself in: its answers are the defaults.
SERVICE = ServiceDefaults(
    name="orders-worker",
    version="1.2.3",
    command="python -m orders_worker",
    environ={
        "WORKER_QUEUES": "orders-worker-jobs",
        "WORKER_HANDLERS": "orders_worker.handlers:router",
        "WORKER_CONCURRENCY": "8",
        "WORKER_JOB_TIMEOUT_MS": "60000",
        "WORKER_SHUTDOWN_TIMEOUT_MS": "90000",
    },
)


def problems(env: dict[str, str]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        load_settings(env, SERVICE)
    return dict(info.value.problems)


def test_the_service_defaults_apply_and_the_environment_wins() -> None:
    config = load_settings({}, SERVICE)
    assert [q.name for q in config.queues] == ["orders-worker-jobs"]
    assert config.queues[0].concurrency == 8
    assert config.settings.job_timeout_ms == 60_000
    assert config.settings.shutdown_timeout_ms == 90_000
    assert config.settings.service_name == "orders-worker", "OTEL_SERVICE_NAME defaults to the service's name"
    assert config.service.version == "1.2.3"
    assert config.stalled_after > config.queues[0].job_timeout
    overridden = load_settings({"WORKER_CONCURRENCY": "3", "OTEL_SERVICE_NAME": "x"}, SERVICE)
    assert overridden.queues[0].concurrency == 3
    assert overridden.settings.service_name == "x"


def test_an_environment_passed_in_is_all_that_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """load_settings(environ) reads that mapping and the service's defaults, nothing else: a
    variable of the process's own environment does not leak into it (the model runs many
    workers in one process, each with its own environment)."""
    monkeypatch.setenv("WORKER_WAIT_TIME_SECONDS", "3")
    monkeypatch.setenv("WORKER_MAX_JOBS", "2")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-the-process")
    config = load_settings({}, SERVICE)
    assert config.settings.wait_time_seconds == 20
    assert config.settings.max_jobs is None
    assert config.settings.service_name == "orders-worker"
    from_process = load_settings(None, SERVICE).settings
    assert (from_process.wait_time_seconds, from_process.max_jobs) == (3, 2), "without one, os.environ is read"


def test_the_environments_region_beats_the_services_default_region() -> None:
    service = ServiceDefaults(environ={"WORKER_QUEUES": "q", "AWS_REGION": "eu-west-1"})
    assert load_settings({}, service).settings.aws_region == "eu-west-1"
    assert load_settings({"AWS_DEFAULT_REGION": "ap-south-1"}, service).settings.aws_region == "ap-south-1"
    assert load_settings(
        {"AWS_REGION": "us-west-2", "AWS_DEFAULT_REGION": "ap-south-1"}, service
    ).settings.aws_region == ("us-west-2")


def test_a_bad_service_default_is_reported_like_a_bad_variable() -> None:
    service = ServiceDefaults(environ={"WORKER_QUEUES": "q", "WORKER_CONCURRENCY": "lots"})
    with pytest.raises(ConfigError) as info:
        load_settings({}, service)
    assert "WORKER_CONCURRENCY" in dict(info.value.problems)


def test_service_defaults_refuse_unknown_variables() -> None:
    with pytest.raises(ValueError, match="WORKER_CONCURENCY"):
        ServiceDefaults(environ={"WORKER_CONCURENCY": "8"})


def test_without_a_queue_the_engine_refuses_to_start() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({})
    assert "name at least one queue" in dict(info.value.problems)["WORKER_QUEUES"]


@pytest.mark.parametrize(
    ("variable", "value", "fragment"),
    [
        ("WORKER_CONCURRENCY", "", "not a whole number"),
        ("WORKER_CONCURRENCY", "abc", "not a whole number"),
        ("WORKER_CONCURRENCY", "0", "greater than or equal to 1"),
        ("WORKER_CONCURRENCY", "-3", "greater than or equal to 1"),
        ("WORKER_CONCURRENCY", "99999999999999999999", "less than or equal to 1000"),
        ("WORKER_JOB_TIMEOUT_MS", "1.5", "not a whole number"),
        ("WORKER_SHUTDOWN_TIMEOUT_MS", "-1", "greater than or equal to 100"),
        ("WORKER_VISIBILITY_TIMEOUT_SECONDS", "50000", "less than or equal to 43200"),
        ("WORKER_HEARTBEAT_FRACTION", "1.5", "less than or equal to 0.9"),
        ("WORKER_WAIT_TIME_SECONDS", "21", "less than or equal to 20"),
        ("WORKER_QUEUES", "", "at least one queue"),
        ("WORKER_QUEUES", "orders,bad name", "not a valid SQS queue name"),
        ("WORKER_QUEUES", "a,a", "listed twice"),
        ("WORKER_QUEUES", "x" * 81, "not a valid SQS queue name"),
        ("WORKER_METRICS_PORT", "70000", "less than or equal to 65535"),
        ("LOG_LEVEL", "LOUD", "DEBUG"),
        ("LOG_PAYLOADS", "maybe", "valid boolean"),
        ("AWS_REGION", "mars", "pattern"),
        ("AWS_ENDPOINT_URL", "localhost:4566", "not an http(s) URL"),
        ("WORKER_HANDLERS", "no-colon", "package.module:attribute"),
        ("DB_POOL_SIZE", "0", "greater than or equal to 1"),
        ("WORKER_MAX_JOBS", "0", "greater than or equal to 1"),
        ("WORKER_MAX_JOBS", "", "not a whole number"),
        ("WORKER_MAX_JOBS", "1.5", "not a whole number"),
        ("WORKER_IDLE_EXIT_SECONDS", "0", "greater than 0"),
        ("WORKER_IDLE_EXIT_SECONDS", "inf", "less than or equal to 604800"),
        ("WORKER_IDLE_EXIT_SECONDS", "nan", "less than or equal to"),
    ],
)
def test_bad_values_are_named(variable: str, value: str, fragment: str) -> None:
    found = problems({variable: value})
    assert variable in found, found
    assert fragment in found[variable]


def test_every_bad_variable_is_reported_at_once() -> None:
    found = problems({"WORKER_CONCURRENCY": "x", "WORKER_JOB_TIMEOUT_MS": "y", "LOG_LEVEL": "z"})
    assert set(found) == {"WORKER_CONCURRENCY", "WORKER_JOB_TIMEOUT_MS", "LOG_LEVEL"}


def test_job_timeout_must_be_below_shutdown_timeout() -> None:
    found = problems({"WORKER_JOB_TIMEOUT_MS": "5000", "WORKER_SHUTDOWN_TIMEOUT_MS": "5000"})
    assert "must be below WORKER_SHUTDOWN_TIMEOUT_MS" in found["WORKER_JOB_TIMEOUT_MS"]


def test_concurrency_must_fit_the_db_pool() -> None:
    found = problems({"WORKER_QUEUES": "a,b", "WORKER_CONCURRENCY": "6", "DB_POOL_SIZE": "10"})
    assert "12 concurrent handlers" in found["DB_POOL_SIZE"]
    assert load_settings({"WORKER_QUEUES": "a,b", "WORKER_CONCURRENCY": "5", "DB_POOL_SIZE": "10"})


def test_per_queue_overrides() -> None:
    config = load_settings(
        {
            "WORKER_QUEUES": "orders,receipts.fifo",
            "WORKER_CONCURRENCY": "4",
            "WORKER_QUEUE_RECEIPTS_FIFO_CONCURRENCY": "80",
            "WORKER_QUEUE_ORDERS_JOB_TIMEOUT_MS": "1000",
        }
    )
    orders, receipts = config.queues
    # The prefetch cap defaults to three times the queue's concurrency, at least 50 and at
    # most 200, and the default pollers cover both: ceil((4 + 50) / 10), ceil((80 + 200) / 10).
    assert (orders.concurrency, orders.job_timeout_ms, orders.prefetch, orders.pollers) == (4, 1000, 50, 6)
    assert (receipts.concurrency, receipts.prefetch, receipts.pollers, receipts.fifo) == (80, 200, 28, True)


def test_prefetch_is_set_for_all_queues_or_one() -> None:
    config = load_settings(
        {"WORKER_QUEUES": "orders,receipts", "WORKER_PREFETCH": "0", "WORKER_QUEUE_RECEIPTS_PREFETCH": "50"}
    )
    orders, receipts = config.queues
    assert (orders.prefetch, orders.pollers) == (0, 1)  # off: the pollers of the concurrency alone
    assert (receipts.prefetch, receipts.pollers) == (50, 6)
    with pytest.raises(ConfigError, match="WORKER_QUEUE_ORDERS_PREFETCH"):
        load_settings({"WORKER_QUEUES": "orders", "WORKER_QUEUE_ORDERS_PREFETCH": "-1"})


@pytest.mark.parametrize(
    ("env", "variable", "fragment"),
    [
        ({"WORKER_QUEUE_NOPE_CONCURRENCY": "2"}, "WORKER_QUEUE_NOPE_CONCURRENCY", "no queue with key 'NOPE'"),
        ({"WORKER_QUEUES": "a", "WORKER_QUEUE_A_COLOUR": "red"}, "WORKER_QUEUE_A_COLOUR", "unknown per-queue setting"),
        (
            {"WORKER_QUEUES": "a", "WORKER_QUEUE_A_CONCURRENCY": "many"},
            "WORKER_QUEUE_A_CONCURRENCY",
            "not a whole number",
        ),
        ({"WORKER_QUEUES": "a", "WORKER_QUEUE_A_CONCURRENCY": "0"}, "WORKER_QUEUE_A_CONCURRENCY", "outside 1..1000"),
        ({"WORKER_QUEUES": "a", "WORKER_QUEUE_A_URL": "ftp://x"}, "WORKER_QUEUE_A_URL", "not a queue URL"),
        (
            {"WORKER_QUEUES": "a", "WORKER_QUEUE_A_JOB_TIMEOUT_MS": "9999999", "WORKER_SHUTDOWN_TIMEOUT_MS": "10000"},
            "WORKER_QUEUE_A_JOB_TIMEOUT_MS",
            "must be below WORKER_SHUTDOWN_TIMEOUT_MS",
        ),
        ({"WORKER_STALLED_AFTER_SECONDS": "1"}, "WORKER_STALLED_AFTER_SECONDS", "the longest job timeout"),
        ({"WORKER_RETRY_BASE_SECONDS": "10", "WORKER_RETRY_MAX_SECONDS": "5"}, "WORKER_RETRY_MAX_SECONDS", "at least"),
    ],
)
def test_inconsistent_and_per_queue_values(env: dict[str, str], variable: str, fragment: str) -> None:
    found = problems(env)
    assert fragment in found[variable], found


def test_secrets_are_redacted_in_the_printed_config() -> None:
    config = load_settings(
        {"DATABASE_URL": "postgresql://app:hunter2@db:5432/orders", "AWS_ENDPOINT_URL": "http://u:pw@localhost:4566"},
        SERVICE,
    )
    text = str(config.describe())
    assert "hunter2" not in text and "pw@" not in text
    assert "postgresql://app:***@db:5432/orders" in text
    assert redact_url("http://localhost:4566") == "http://localhost:4566"


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"WORKER_VISIBILITY_TIMEOUT_SECONDS": "10", "WORKER_HEARTBEAT_FRACTION": "0.9"}, "WORKER_HEARTBEAT_FRACTION"),
        ({"WORKER_VISIBILITY_TIMEOUT_SECONDS": "4", "WORKER_HEARTBEAT_FRACTION": "0.8"}, "WORKER_HEARTBEAT_FRACTION"),
        (
            {"WORKER_HEARTBEAT_FRACTION": "0.9", "WORKER_QUEUE_ORDERS_WORKER_JOBS_VISIBILITY_TIMEOUT_SECONDS": "5"},
            "WORKER_QUEUE_ORDERS_WORKER_JOBS_VISIBILITY_TIMEOUT_SECONDS",
        ),
    ],
)
def test_heartbeats_that_could_never_extend_a_lease_in_time_refuse_to_boot(env: dict[str, str], variable: str) -> None:
    found = problems(env)
    assert set(found) == {variable}, found
    assert "no lease could be extended in time" in found[variable]
    assert "use a fraction of at most" in found[variable]


@pytest.mark.parametrize(("visibility", "fraction"), [(2, 0.5), (30, 0.5), (30, 0.85), (43_200, 0.9), (7, 0.5)])
def test_heartbeat_settings_that_work_are_accepted(visibility: int, fraction: float) -> None:
    env = {"WORKER_VISIBILITY_TIMEOUT_SECONDS": str(visibility), "WORKER_HEARTBEAT_FRACTION": str(fraction)}
    assert load_settings(env, SERVICE).queues[0].visibility_timeout_seconds == visibility


def test_a_rate_limit_applies_to_every_queue_and_a_queue_may_have_its_own() -> None:
    config = load_settings(
        {"WORKER_QUEUES": "orders,emails", "WORKER_RATE_LIMIT": "3000/min", "WORKER_QUEUE_EMAILS_RATE_LIMIT": "2/s"}
    )
    assert {q.name: q.rate_limit for q in config.queues} == {"orders": 50.0, "emails": 2.0}
    assert load_settings({"WORKER_QUEUES": "orders"}).queues[0].rate_limit is None
    with pytest.raises(ConfigError) as info:
        load_settings({"WORKER_QUEUES": "orders", "WORKER_QUEUE_ORDERS_RATE_LIMIT": "lots"})
    [(variable, message)] = info.value.problems
    assert variable == "WORKER_QUEUE_ORDERS_RATE_LIMIT" and "N/s" in message


def test_a_rate_s_burst_is_one_by_default_and_at_most_a_window_s_count() -> None:
    config = load_settings(
        {"WORKER_QUEUES": "orders,emails", "WORKER_RATE_LIMIT": "20/s", "WORKER_QUEUE_EMAILS_RATE_BURST": "5"}
    )
    assert {q.name: q.rate_burst for q in config.queues} == {"orders": 1, "emails": 5}
    assert problems({"WORKER_QUEUES": "orders", "WORKER_RATE_BURST": "5"}) == {
        "WORKER_RATE_BURST": "a burst is of a rate limit: set WORKER_RATE_LIMIT too"
    }
    assert problems(
        {"WORKER_QUEUES": "orders", "WORKER_RATE_LIMIT": "20/s", "WORKER_QUEUE_ORDERS_RATE_BURST": "21"}
    ) == {"WORKER_QUEUE_ORDERS_RATE_BURST": "21 is more starts at once than 20/s allows in a window (20)"}


def test_a_group_cap_applies_to_standard_queues_below_their_concurrency() -> None:
    config = load_settings(
        {
            "WORKER_QUEUES": "orders,emails,jobs.fifo,small",
            "WORKER_CONCURRENCY": "10",
            "WORKER_GROUP_CONCURRENCY": "2",
            "WORKER_QUEUE_EMAILS_GROUP_CONCURRENCY": "5",
            "WORKER_QUEUE_SMALL_CONCURRENCY": "2",
        }
    )
    caps = {q.name: q.group_concurrency for q in config.queues}
    # FIFO runs one job per group anyway; a cap at the concurrency never bites.
    assert caps == {"orders": 2, "emails": 5, "jobs.fifo": None, "small": None}
    assert load_settings({"WORKER_QUEUES": "orders"}).queues[0].group_concurrency is None
    for env in ({"WORKER_GROUP_CONCURRENCY": "0"}, {"WORKER_QUEUE_ORDERS_GROUP_CONCURRENCY": "two"}):
        with pytest.raises(ConfigError) as info:
            load_settings({"WORKER_QUEUES": "orders", **env})
        [(variable, _)] = info.value.problems
        assert variable == next(iter(env))


def test_a_queue_whose_key_ends_in_group_is_told_apart_from_a_group_cap() -> None:
    config = load_settings({"WORKER_QUEUES": "x_group,y", "WORKER_QUEUE_X_GROUP_CONCURRENCY": "3"})
    default = config.settings.concurrency
    assert [(q.name, q.concurrency, q.group_concurrency) for q in config.queues] == [
        ("x_group", 3, None),
        ("y", default, None),
    ]
    with pytest.raises(ConfigError) as info:
        load_settings({"WORKER_QUEUES": "x_group,x", "WORKER_QUEUE_X_GROUP_CONCURRENCY": "3"})
    [(variable, message)] = info.value.problems
    assert variable == "WORKER_QUEUE_X_GROUP_CONCURRENCY" and "ambiguous" in message, message


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:12/34@db:5432/x", "postgresql://app:***@db:5432/x"),  # "/" in the password
        ("postgresql://app:p@ss?#w@db/x", "postgresql://app:***@db/x"),
        ("postgresql://db/orders?auth=t0k3n&sslmode=require", "postgresql://db/orders?auth=***&sslmode=require"),
        ("https://h/q?X-Amz-Signature=abc&region=us-east-1", "https://h/q?X-Amz-Signature=***&region=us-east-1"),
        ("jdbc:postgresql://app:pw@db/orders", "jdbc:postgresql://app:***@db/orders"),
        ("host=db user=app secret_key=k dbname=orders", "host=db user=app secret_key=*** dbname=orders"),
        ("Server=db;Pwd='a b';Database=orders", "Server=db;Pwd=***;Database=orders"),
        ("http://localhost:4566", "http://localhost:4566"),
        ("postgresql://app@db/orders", "postgresql://app@db/orders"),
    ],
)
def test_redact_url_hides_every_password_and_every_parameter_not_known_to_be_safe(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    ("variable", "closest"),
    [
        ("WORKER_CONCURENCY", "WORKER_CONCURRENCY"),
        ("WORKER_QUEUE", "WORKER_QUEUES"),
        ("WORKER_SHUTDOWN_TIMEOUT", "WORKER_SHUTDOWN_TIMEOUT_MS"),
        ("WORKER_QUEUE_ORDERS_WORKER_JOBS_CONCURENCY", "WORKER_QUEUE_ORDERS_WORKER_JOBS_CONCURRENCY"),
    ],
)
def test_a_misspelt_variable_refuses_to_boot_naming_the_closest_known_one(variable: str, closest: str) -> None:
    """A typo'd setting is not ignored (the default would run instead without a word)."""
    found = problems({variable: "4"})
    assert variable in found, found
    assert f"did you mean {closest}?" in found[variable]


def test_an_unknown_variable_is_named_also_beside_bad_values() -> None:
    found = problems({"WORKER_NO_SUCH_THING": "1", "WORKER_CONCURRENCY": "lots"})
    assert set(found) == {"WORKER_NO_SUCH_THING", "WORKER_CONCURRENCY"}
    assert "unknown setting" in found["WORKER_NO_SUCH_THING"]


def test_kubernetes_service_links_are_not_taken_for_settings() -> None:
    """A Service named worker-... in the namespace injects these into every pod."""
    links = {
        "WORKER_METRICS_SERVICE_HOST": "10.0.0.7",
        "WORKER_METRICS_SERVICE_PORT": "9102",
        "WORKER_PORT": "tcp://10.0.0.7:9102",
        "WORKER_PORT_9102_TCP_ADDR": "10.0.0.7",
    }
    assert load_settings(links, SERVICE).queues[0].concurrency == 8


def test_a_default_poller_count_past_the_bound_is_refused_naming_its_cause() -> None:
    """WORKER_PREFETCH=10000 made ceil((8 + 10000) / 10) = 1,001 pollers, each a connection."""
    found = problems({"WORKER_PREFETCH": "10000"})
    assert "WORKER_PREFETCH" in found, found
    assert "1001 pollers" in found["WORKER_PREFETCH"] and "WORKER_POLLERS" in found["WORKER_PREFETCH"]
    per_queue = problems({"WORKER_QUEUE_ORDERS_WORKER_JOBS_PREFETCH": "5000"})
    assert "pollers" in per_queue.get("WORKER_QUEUE_ORDERS_WORKER_JOBS_PREFETCH", ""), per_queue
    # Asked for, a count within the bound stands: the owner chose it.
    config = load_settings({**SERVICE.environ, "WORKER_PREFETCH": "10000", "WORKER_POLLERS": "20"}, SERVICE)
    assert config.queues[0].pollers == 20


def test_adaptive_concurrency_is_off_by_default_and_set_for_all_queues_or_one() -> None:
    config = load_settings({"WORKER_QUEUES": "orders,receipts"})
    assert [(q.adaptive, q.concurrency_floor) for q in config.queues] == [(False, 1), (False, 1)]
    config = load_settings(
        {
            "WORKER_QUEUES": "orders,receipts",
            "WORKER_CONCURRENCY": "48",
            "WORKER_ADAPTIVE_CONCURRENCY": "true",
            "WORKER_CONCURRENCY_FLOOR": "2",
            "WORKER_QUEUE_RECEIPTS_ADAPTIVE_CONCURRENCY": "off",
            "WORKER_QUEUE_ORDERS_CONCURRENCY_FLOOR": "4",
        }
    )
    orders, receipts = config.queues
    assert (orders.adaptive, orders.concurrency_floor, orders.concurrency) == (True, 4, 48)
    assert (receipts.adaptive, receipts.concurrency_floor) == (False, 2)
    assert config.describe()["queues"][0]["adaptive_concurrency"] is True


@pytest.mark.parametrize(
    ("env", "variable", "fragment"),
    [
        ({"WORKER_QUEUE_ORDERS_ADAPTIVE_CONCURRENCY": "maybe"}, "WORKER_QUEUE_ORDERS_ADAPTIVE_CONCURRENCY", "true or"),
        ({"WORKER_QUEUE_ORDERS_CONCURRENCY_FLOOR": "0"}, "WORKER_QUEUE_ORDERS_CONCURRENCY_FLOOR", "outside 1..1000"),
        ({"WORKER_CONCURRENCY_FLOOR": "0"}, "WORKER_CONCURRENCY_FLOOR", "greater than or equal to 1"),
        ({"WORKER_ADAPTIVE_CONCURRENCY": "sometimes"}, "WORKER_ADAPTIVE_CONCURRENCY", "valid boolean"),
        # A floor above the ceiling, named by whichever variable set it.
        (
            {"WORKER_ADAPTIVE_CONCURRENCY": "1", "WORKER_CONCURRENCY": "4", "WORKER_CONCURRENCY_FLOOR": "5"},
            "WORKER_CONCURRENCY_FLOOR",
            "floor 5 is above orders's concurrency 4 (WORKER_CONCURRENCY",
        ),
        (
            {
                "WORKER_QUEUE_ORDERS_ADAPTIVE_CONCURRENCY": "yes",
                "WORKER_QUEUE_ORDERS_CONCURRENCY": "2",
                "WORKER_QUEUE_ORDERS_CONCURRENCY_FLOOR": "3",
            },
            "WORKER_QUEUE_ORDERS_CONCURRENCY_FLOOR",
            "(WORKER_QUEUE_ORDERS_CONCURRENCY, the ceiling)",
        ),
    ],
)
def test_bad_adaptive_settings_are_refused_naming_the_variable(
    env: dict[str, str], variable: str, fragment: str
) -> None:
    found = problems({"WORKER_QUEUES": "orders", **env})
    assert list(found) == [variable], found
    assert fragment in found[variable], found


def test_a_floor_above_the_concurrency_is_harmless_while_adaptive_is_off() -> None:
    config = load_settings({"WORKER_QUEUES": "orders", "WORKER_CONCURRENCY": "2", "WORKER_CONCURRENCY_FLOOR": "4"})
    assert config.queues[0].concurrency_floor == 4 and not config.queues[0].adaptive


def test_a_misspelt_queue_in_a_long_setting_is_named_by_the_setting_meant() -> None:
    """WORKER_QUEUE_NOPE_ADAPTIVE_CONCURRENCY also ends in _CONCURRENCY: the queue not found
    is NOPE (the longer setting), not NOPE_ADAPTIVE."""
    found = problems({"WORKER_QUEUES": "orders", "WORKER_QUEUE_NOPE_ADAPTIVE_CONCURRENCY": "true"})
    assert "no queue with key 'NOPE'" in found["WORKER_QUEUE_NOPE_ADAPTIVE_CONCURRENCY"], found


def test_run_to_completion_is_off_unless_asked_for_and_one_value_for_the_process() -> None:
    """WORKER_MAX_JOBS and WORKER_IDLE_EXIT_SECONDS: unset by default; the process's, not a
    queue's (no per-queue override: it is the pod or task that ends)."""
    config = load_settings({}, SERVICE)
    assert config.settings.max_jobs is None and config.settings.idle_exit_seconds is None
    config = load_settings({"WORKER_MAX_JOBS": "1", "WORKER_IDLE_EXIT_SECONDS": "60"}, SERVICE)
    assert config.settings.max_jobs == 1 and config.settings.idle_exit_seconds == 60
    assert config.describe()["max_jobs"] == 1
    found = problems({"WORKER_QUEUE_ORDERS_WORKER_JOBS_MAX_JOBS": "1"})
    assert "unknown per-queue setting" in found["WORKER_QUEUE_ORDERS_WORKER_JOBS_MAX_JOBS"], found


def test_the_event_loop_is_auto_by_default_and_a_bad_choice_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """WORKER_EVENT_LOOP: auto unless set; a value that is none of the three, or uvloop
    where it is not installed, refuses to boot naming the variable (and the extra)."""
    from sqs_worker_engine.process.settings import fields

    assert load_settings({}, SERVICE).settings.event_loop == "auto"
    assert load_settings({"WORKER_EVENT_LOOP": "asyncio"}, SERVICE).settings.event_loop == "asyncio"
    assert "WORKER_EVENT_LOOP" in problems({"WORKER_EVENT_LOOP": "libuv"})
    monkeypatch.setattr(fields, "uvloop_installed", lambda: False)
    assert "sqs-worker-engine[uvloop]" in problems({"WORKER_EVENT_LOOP": "uvloop"})["WORKER_EVENT_LOOP"]
    assert load_settings({"WORKER_EVENT_LOOP": "auto"}, SERVICE).settings.event_loop == "auto"


def test_two_queues_sharing_one_per_queue_key_are_refused_naming_both_and_the_key() -> None:
    """`a-v2` and `a_v2` are both WORKER_QUEUE_A_V2_*: an override would reach one of them
    only, and which one is no one's choice."""
    for env in (
        {"WORKER_QUEUES": "a-v2,a_v2", "WORKER_QUEUE_A_V2_CONCURRENCY": "3"},
        {"WORKER_QUEUES": "orders,Orders"},
    ):
        found = problems(env)
        assert list(found) == ["WORKER_QUEUES"], found
        message = found["WORKER_QUEUES"]
        first, second = env["WORKER_QUEUES"].split(",")
        assert repr(first) in message and repr(second) in message, message
        assert f"WORKER_QUEUE_{first.upper().replace('-', '_')}_" in message, message
    assert [q.name for q in load_settings({"WORKER_QUEUES": "a-v2,a_v3"}).queues] == ["a-v2", "a_v3"]


# What kubelet injects into every pod for a Service in its namespace, for Services named
# worker-queue (two ports, one named) and worker-queue-metrics (IPv6): service links.
SERVICE_LINKS = {
    "WORKER_QUEUE_SERVICE_HOST": "10.96.0.12",
    "WORKER_QUEUE_SERVICE_PORT": "9102",
    "WORKER_QUEUE_SERVICE_PORT_METRICS": "9102",
    "WORKER_QUEUE_SERVICE_PORT_HTTP_ALT": "8080",
    "WORKER_QUEUE_PORT": "tcp://10.96.0.12:9102",
    "WORKER_QUEUE_PORT_9102_TCP": "tcp://10.96.0.12:9102",
    "WORKER_QUEUE_PORT_9102_TCP_PROTO": "tcp",
    "WORKER_QUEUE_PORT_9102_TCP_PORT": "9102",
    "WORKER_QUEUE_PORT_9102_TCP_ADDR": "10.96.0.12",
    "WORKER_QUEUE_PORT_8080_UDP": "udp://10.96.0.12:8080",
    "WORKER_QUEUE_PORT_8080_UDP_PROTO": "udp",
    "WORKER_QUEUE_PORT_8080_UDP_PORT": "8080",
    "WORKER_QUEUE_PORT_8080_UDP_ADDR": "10.96.0.12",
    "WORKER_QUEUE_METRICS_SERVICE_HOST": "fd00:10:96::7",
    "WORKER_QUEUE_METRICS_SERVICE_PORT": "9102",
    "WORKER_QUEUE_METRICS_PORT": "tcp://[fd00:10:96::7]:9102",
    "WORKER_QUEUE_METRICS_PORT_9102_SCTP": "sctp://[fd00:10:96::7]:9102",
    "WORKER_QUEUE_METRICS_PORT_9102_SCTP_PROTO": "sctp",
    "WORKER_QUEUE_METRICS_PORT_9102_SCTP_PORT": "9102",
    "WORKER_QUEUE_METRICS_PORT_9102_SCTP_ADDR": "fd00:10:96::7",
}


def test_service_links_of_services_named_worker_queue_are_told_apart_and_ignored() -> None:
    config = load_settings(SERVICE_LINKS, SERVICE)
    assert [(q.name, q.concurrency) for q in config.queues] == [("orders-worker-jobs", 8)]
    # Beside a per-queue setting that is one, and for a queue named like a Service.
    env = {**SERVICE_LINKS, "WORKER_QUEUES": "orders,metrics", "WORKER_QUEUE_METRICS_CONCURRENCY": "3"}
    assert [q.concurrency for q in load_settings(env).queues] == [8, 3]


@pytest.mark.parametrize(
    ("variable", "value", "fragment"),
    [
        # Typos of per-queue settings, among service links: still refused, with the setting meant.
        (
            "WORKER_QUEUE_ORDERS_WORKER_JOBS_CONCURENCY",
            "4",
            "did you mean WORKER_QUEUE_ORDERS_WORKER_JOBS_CONCURRENCY?",
        ),
        ("WORKER_QUEUE_ORDERS_WORKER_JOBS_POLLER", "4", "did you mean WORKER_QUEUE_ORDERS_WORKER_JOBS_POLLERS?"),
        # A link's name with a value no Service link has: a setting meant, not a link.
        ("WORKER_QUEUE_PORT", "9102", "unknown per-queue setting"),
        ("WORKER_QUEUE_SERVICE_HOST", "orders", "unknown per-queue setting"),
        ("WORKER_QUEUE_SERVICE_PORT", "99999", "unknown per-queue setting"),
        ("WORKER_QUEUE_PORT_9102_TCP", "tcp://10.96.0.12:9103", "unknown per-queue setting"),
        ("WORKER_QUEUE_PORT_9102_TCP_PROTO", "udp", "unknown per-queue setting"),
        ("WORKER_QUEUE_PORT_9102_TCP_PORT", "80", "unknown per-queue setting"),
        ("WORKER_QUEUE_PORT_9102_TCP_ADDR", "10.96.0", "unknown per-queue setting"),
        ("WORKER_QUEUE_PORT_9102_HTTP", "tcp://10.96.0.12:9102", "unknown per-queue setting"),
        ("WORKER_PORT", "tcp://db.internal:5432", "unknown setting"),
        ("WORKER_METRICS_SERVICE_HOST", "", "unknown setting"),
    ],
)
def test_a_variable_shaped_like_a_service_link_without_a_links_value_is_refused(
    variable: str, value: str, fragment: str
) -> None:
    found = problems({**SERVICE_LINKS, variable: value})
    assert list(found) == [variable], found
    assert fragment in found[variable], found


WHOLE_NUMBERS_NOT_WRITTEN_IN_DIGITS = [
    "\uff15",
    "\u0663",
    "1_0",
    "+5",
    " 5",
    "5 ",
    "5\n",
    "5.0",
    "0x5",
    "1e1",
    "",
    "\u0663\u0663",
]


@pytest.mark.parametrize("value", WHOLE_NUMBERS_NOT_WRITTEN_IN_DIGITS)
def test_a_per_queue_whole_number_is_read_as_the_global_one_is(value: str) -> None:
    """One reading of a whole number for WORKER_CONCURRENCY and WORKER_QUEUE_<KEY>_CONCURRENCY:
    plain digits 0-9; int() took Unicode digits, `1_0`, `+5` and spaces per queue only."""
    for variable in ("WORKER_CONCURRENCY", "WORKER_QUEUE_ORDERS_WORKER_JOBS_CONCURRENCY", "WORKER_MAX_JOBS"):
        found = problems({variable: value})
        assert list(found) == [variable], found
        assert "not a whole number" in found[variable] and repr(value) in found[variable], found


def test_whole_numbers_far_past_their_bound_are_out_of_range_not_a_crash() -> None:
    huge = "9" * 5000  # past int()'s 4,300 digits
    for variable in ("WORKER_CONCURRENCY", "WORKER_QUEUE_ORDERS_WORKER_JOBS_CONCURRENCY"):
        found = problems({variable: huge})
        assert list(found) == [variable], found
        assert "not a whole number" not in found[variable], found
    config = load_settings({"WORKER_CONCURRENCY": "007", "WORKER_QUEUE_ORDERS_WORKER_JOBS_PREFETCH": "0"}, SERVICE)
    assert (config.queues[0].concurrency, config.queues[0].prefetch) == (7, 0)


@pytest.mark.parametrize(
    "value",
    [
        "0." + "0" * 37 + "28/s",  # 2.8e-39 a second: the next start in 10^31 years
        "0.00001/s",  # one start in 28 hours
        "0.04/h",  # one in 25 hours
        "1" * 400 + "/s",  # infinite as a float
        "\u0663/s",  # Arabic-Indic 3
        "\uff150/min",  # fullwidth 5, then 0
    ],
)
def test_a_rate_no_queue_could_live_with_is_refused_naming_the_variable(value: str) -> None:
    for variable in ("WORKER_RATE_LIMIT", "WORKER_QUEUE_ORDERS_WORKER_JOBS_RATE_LIMIT"):
        found = problems({variable: value})
        assert list(found) == [variable], found
    floor = problems({"WORKER_QUEUE_ORDERS_WORKER_JOBS_RATE_LIMIT": "0.04/h"})
    assert "one start a day" in next(iter(floor.values())), floor


def test_the_slowest_rate_taken_is_one_start_a_day() -> None:
    config = load_settings(
        {"WORKER_RATE_LIMIT": "0.0417/h", "WORKER_QUEUES": "a,b", "WORKER_QUEUE_B_RATE_LIMIT": "1/h"}
    )
    assert [round(86_400 * (q.rate_limit or 0), 2) for q in config.queues] == [1.0, 24.0]


# -- the owner's secrets, and where metrics go ------------------------------------------


def test_owner_secrets_show_as_set_or_unset_never_their_values() -> None:
    service = ServiceDefaults(secrets=("API_TOKEN", "BILLING_DATABASE_URL", "DATABASE_URL"))
    config = load_settings(
        {"WORKER_QUEUES": "orders", "API_TOKEN": "tok-s3cr3t", "DATABASE_URL": "postgresql://u:pw-s3cr3t@db/x"}, service
    )
    described = config.describe()
    assert described["secrets"] == {"API_TOKEN": "set", "BILLING_DATABASE_URL": "unset", "DATABASE_URL": "set"}
    assert "s3cr3t" not in json.dumps(described)


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("api_token", "not an environment variable name"),
        ("1TOKEN", "not an environment variable name"),
        ("API-TOKEN", "not an environment variable name"),
        ("WORKER_TOKEN", "a setting of the engine"),
        ("AWS_SECRET_ACCESS_KEY", "a setting of the engine"),
        ("LOG_LEVEL", "a setting of the engine"),
    ],
)
def test_an_owner_secret_must_be_a_variable_of_the_services_own(name: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        ServiceDefaults(secrets=(name,))


def test_the_metrics_exporter_is_one_of_three() -> None:
    assert load_settings({"WORKER_QUEUES": "orders"}).settings.metrics_exporter == "prometheus"
    for exporter in ("otlp", "both"):
        config = load_settings({"WORKER_QUEUES": "orders", "WORKER_METRICS_EXPORTER": exporter})
        assert config.settings.metrics_exporter == exporter
    with pytest.raises(ConfigError) as refused:
        load_settings({"WORKER_QUEUES": "orders", "WORKER_METRICS_EXPORTER": "statsd"})
    assert [var for var, _ in refused.value.problems] == ["WORKER_METRICS_EXPORTER"]


def test_pushing_metrics_over_otlp_without_the_otlp_extra_refuses_to_boot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Accepted before, then `run` exported no metrics at all (a log line said why)."""
    import sys

    # Not importable, as where the extra is not installed (a None entry stops the import).
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.metric_exporter", None)
    for exporter in ("otlp", "both"):
        found = problems({"WORKER_METRICS_EXPORTER": exporter})
        assert list(found) == ["WORKER_METRICS_EXPORTER"], found
        assert "install the engine's otlp extra (sqs-worker-engine[otlp])" in found["WORKER_METRICS_EXPORTER"]
        assert "\n" not in found["WORKER_METRICS_EXPORTER"]
    assert load_settings({}, SERVICE).settings.metrics_exporter == "prometheus", "scraping needs no extra"


def test_the_unprefixed_settings_limits_names_are_the_engines() -> None:
    """limits.py lists them for the template's hooks, which cannot import the settings."""
    from sqs_worker_engine.base.limits import RESERVED_PREFIXES, UNPREFIXED_SETTINGS
    from sqs_worker_engine.process.settings.fields import ALIASES

    unprefixed = {name for name in ALIASES if not name.startswith(RESERVED_PREFIXES)} - {"DATABASE_URL"}
    assert unprefixed == set(UNPREFIXED_SETTINGS)


def test_every_setting_says_what_it_does() -> None:
    """The settings reference (docs/reference/settings.md) is written from each field's
    description: a setting without one would reach its operators as a blank cell."""
    from sqs_worker_engine.process.settings import Settings
    from sqs_worker_engine.process.settings.fields import ALIASES

    variable = {name: var for var, name in reversed(ALIASES.items())}  # AWS_REGION before AWS_DEFAULT_REGION
    blank = [variable[name] for name, info in Settings.model_fields.items() if not (info.description or "").strip()]
    assert not blank, f"settings without a description=: {', '.join(blank)}"


def test_every_description_belongs_to_a_setting() -> None:
    """A missing description is a KeyError at import (`setting()`); one left behind by a
    removed or renamed setting would be text that no operator ever reads."""
    from pydantic import AliasChoices

    from sqs_worker_engine.process.settings import Settings
    from sqs_worker_engine.process.settings.descriptions import DESCRIPTIONS

    first = {
        name: info.validation_alias.choices[0]
        if isinstance(info.validation_alias, AliasChoices)
        else info.validation_alias
        for name, info in Settings.model_fields.items()
    }
    assert sorted(DESCRIPTIONS) == sorted(map(str, first.values()))
    assert {name: info.description for name, info in Settings.model_fields.items()} == {
        name: DESCRIPTIONS[str(var)] for name, var in first.items()
    }


@pytest.mark.parametrize(
    ("concurrency", "cap", "pollers"),
    [(1, 50, 6), (8, 50, 6), (20, 60, 8), (50, 150, 20), (100, 200, 30), (200, 200, 40), (500, 500, 100)],
)
def test_the_default_prefetch_cap_is_three_times_the_concurrency_within_50_and_200(
    concurrency: int, cap: int, pollers: int
) -> None:
    """Short jobs far from SQS need two to three times their concurrency in hand (Little's
    law: 10 ms jobs, 25 ms receives); the cap bounds memory and what a SIGKILL strands, and
    is never above the concurrency's own from 200 up (the cap before)."""
    (queue,) = load_settings({"WORKER_QUEUES": "orders", "WORKER_CONCURRENCY": str(concurrency)}).queues
    assert (queue.prefetch, queue.pollers) == (cap, pollers)
