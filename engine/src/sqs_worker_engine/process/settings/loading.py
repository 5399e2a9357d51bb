"""`load_settings`: the environment over a service's defaults, Kubernetes' service links
dropped, unknown variables named (with the closest known one), the engine's settings and
the service's own validated together, each queue's overrides read, the checks across
them made, and every problem refused at once (`ConfigError`)."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from typing import Any

from pydantic import AliasChoices, ValidationError
from pydantic_settings import BaseSettings

from .checks import check_capacity, check_priority, check_stall_threshold, check_timeouts
from .config import WorkerConfig
from .fields import ALIASES, ConfigError, ServiceDefaults, Settings, own_variables
from .queues import QUEUE_OVERRIDE_PREFIX, QueueReader, queue_overrides
from .service_links import service_link


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
