"""`load_settings`: the environment over a service's defaults, Kubernetes' service links
dropped, unknown variables named (with the closest known one), the engine's settings and
the service's own validated together, each queue's overrides read, the checks across
them made, and every problem refused at once (`ConfigError`).

Kubernetes' service links (`service_link`) are what kubelet writes into every container of
a pod for each Service of its namespace (unless the pod sets enableServiceLinks: false),
told apart from settings by name and value together. A Service's links are named after
it, so a Service whose name starts like a setting (`worker-metrics`, `worker-queue`) gives
variables of the engine's own prefixes, and one of them may even be a setting's name
(`WORKER_METRICS_PORT=tcp://10.0.0.11:9102`). Every link is dropped before any of the
engine's settings is read; a variable of a link's name whose value is not a link's is left
to be read, or refused, as a setting.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
from collections.abc import Mapping
from typing import Any

from pydantic import AliasChoices, ValidationError
from pydantic_settings import BaseSettings

from .checks import check_capacity, check_priority, check_stall_threshold, check_timeouts
from .config import WorkerConfig
from .fields import ALIASES, ConfigError, ServiceDefaults, Settings, own_variables
from .queues import QUEUE_OVERRIDE_PREFIX, QueueReader, queue_overrides


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
    values: dict[str, Any] = {k: v for k, v in ours.items() if k in ALIASES}
    values.setdefault("OTEL_SERVICE_NAME", service.name)
    owners: BaseSettings | None = None
    if service.settings is not None and own:  # the service's own, named in the same refusal
        owners, refused = _own_settings(service.settings, env)
        problems += refused
    try:
        settings = Settings.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(problems + _explain(exc, ours)) from None

    overrides = queue_overrides(ours, settings, problems)
    shared = settings.shared_concurrency
    check_priority(settings, problems)
    # With a shared budget a queue may take all of it unless its own concurrency (or one the
    # environment sets for every queue) caps it lower; a service's default does not.
    base_concurrency = settings.concurrency if shared is None or "WORKER_CONCURRENCY" in given else shared
    queues = [QueueReader(name, overrides[name], settings, problems).read(base_concurrency) for name in settings.queues]
    check_timeouts(settings, queues, overrides, problems)
    check_capacity(settings, queues, problems)
    secrets = {name: bool(env.get(name)) for name in service.secrets}
    config = WorkerConfig(settings, tuple(queues), service, owners, secrets)
    check_stall_threshold(settings, queues, problems)
    if problems:
        raise ConfigError(problems)
    return config


def _environment(given: Mapping[str, str], service: ServiceDefaults) -> dict[str, str]:
    """The environment over the service's defaults."""
    defaults = dict(service.environ)
    if "AWS_DEFAULT_REGION" in given:
        defaults.pop("AWS_REGION", None)  # a region the environment gives beats the service's default
    return {**defaults, **given}


def _is_unknown(var: str) -> bool:
    """A WORKER_ variable the engine does not read (per-queue ones are checked by name later)."""
    return var.startswith("WORKER_") and var not in ALIASES and not var.startswith(QUEUE_OVERRIDE_PREFIX)


def unknown_setting(var: str) -> str:
    """What to say about an unknown WORKER_ variable: the closest known one, if any is close."""
    known = [alias for alias in ALIASES if alias.startswith("WORKER_")]
    close = difflib.get_close_matches(var, known, n=1, cutoff=0.75)
    if close:
        return f"unknown setting; did you mean {close[0]}?"
    return "unknown setting (the settings reference lists them: docs/reference/settings.md; per queue: WORKER_QUEUE_<KEY>_<SETTING>)"


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
        var = loc if loc in ALIASES else next((a for a, n in ALIASES.items() if n == loc), loc)
        raw = env.get(var)
        shown = "" if raw is None or "URL" in var else f" (got {raw!r})"
        problems.append((var, f"{err['msg']}{shown}"))
    return problems


# What kubelet writes, under the Service's name upper-cased with "-" as "_" (a Service
# `worker-queue` gives WORKER_QUEUE_...), for a ClusterIP 10.96.0.12 and a port 9102 named
# `metrics` (an IPv6 ClusterIP is in brackets in a URL: tcp://[fd00::7]:9102):
#   <NAME>_SERVICE_HOST=10.96.0.12          <NAME>_SERVICE_PORT=9102
#   <NAME>_SERVICE_PORT_METRICS=9102        <NAME>_PORT=tcp://10.96.0.12:9102
#   <NAME>_PORT_9102_TCP=tcp://10.96.0.12:9102
#   <NAME>_PORT_9102_TCP_PROTO=tcp  <NAME>_PORT_9102_TCP_PORT=9102  <NAME>_PORT_9102_TCP_ADDR=10.96.0.12
# Told apart by name and value together, so that a misspelt setting is still refused.
_LINK_PORT = re.compile(r"[A-Z0-9_]+?_PORT_([0-9]{1,5})_(TCP|UDP|SCTP)(?:_(PROTO|PORT|ADDR))?")
_LINK_URL = re.compile(r"(tcp|udp|sctp)://(\[[0-9A-Fa-f:.]+\]|[0-9.]+):([0-9]{1,5})")


def _ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _port(text: str) -> bool:
    return text.isascii() and text.isdigit() and not text.startswith("0") and int(text) <= 65535


def _link_url(text: str, protocol: str | None = None, port: str | None = None) -> bool:
    match = _LINK_URL.fullmatch(text)
    if match is None or not _ip(match.group(2).strip("[]")) or not _port(match.group(3)):
        return False
    return protocol in (None, match.group(1)) and port in (None, match.group(3))


def service_link(var: str, value: str) -> bool:
    """Whether `var=value` is a Kubernetes service link (above), by its name and its value."""
    by_port = _LINK_PORT.fullmatch(var)
    if by_port:
        port, protocol, part = by_port.group(1), by_port.group(2).lower(), by_port.group(3)
        if not _port(port):
            return False
        if part is None:
            return _link_url(value, protocol, port)
        return {"PROTO": value == protocol, "PORT": value == port, "ADDR": _ip(value)}[part]
    if re.fullmatch(r"[A-Z0-9_]+_SERVICE_HOST", var):
        return _ip(value)
    if re.fullmatch(r"[A-Z0-9_]+_SERVICE_PORT(_[A-Z0-9_]+)?", var):
        return _port(value)
    if re.fullmatch(r"[A-Z0-9_]+_PORT", var):
        return _link_url(value)
    return False
