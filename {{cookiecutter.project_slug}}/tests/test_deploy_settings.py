"""Every setting of this service's own without a default (`Settings` in service.py) reaches the
worker on every target this service deploys to. Without it the first rollout fails: the worker
refuses to start (exit 2) naming the variable. Set it in deploy/settings.env (your plain
settings, the one file every target reads), or make it a secret (deploy/README.md, "Settings
and secrets").

What reaches the worker is read from deploy/ as the platforms read it:
- ECS: the worker container's Environment and Secrets in deploy/ecs/service.yaml, and
  deploy/settings.env when the container reads it (its EnvironmentFiles);
- Kubernetes: the worker container's env, and what its envFrom names: the ConfigMap
  deploy/README.md makes from deploy/settings.env, and the Secret's keys External Secrets
  gives it (deploy/k8s/optional/external-secrets.yaml).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import AliasChoices

from {{ cookiecutter.package_name }}.service import SERVICE

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
SETTINGS_FILE = DEPLOY / "settings.env"
# What deploy/README.md makes from deploy/settings.env (`kubectl create configmap --from-env-file`),
# and the Secret of the service's secrets.
SETTINGS_CONFIGMAP = "{{ cookiecutter.project_slug }}-settings"
SECRET = "{{ cookiecutter.project_slug }}-secrets"


def env_file(path: Path) -> dict[str, str]:
    """KEY=value lines, as ECS's EnvironmentFiles and `kubectl create configmap --from-env-file`
    read them: lines starting with # and blank lines left out, the value everything after the
    first = (quotes included)."""
    found: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, equals, value = line.partition("=")
        assert equals and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key), (
            f"{path.name}, line {number}: not KEY=value, which ECS and kubectl refuse: {line!r}"
        )
        found[key] = value
    return found


def required() -> dict[str, set[str]]:
    """Each field of the service's settings without a default, and the variables that set it
    (its validation_alias; else the env_prefix and its name, as pydantic-settings reads it)."""
    settings = SERVICE.settings
    if settings is None:
        return {}
    prefix = str(settings.model_config.get("env_prefix", ""))
    out: dict[str, set[str]] = {}
    for name, field in settings.model_fields.items():
        if not field.is_required():
            continue
        alias = field.validation_alias or field.alias
        if isinstance(alias, str):
            out[name] = {alias}
        elif isinstance(alias, AliasChoices):
            out[name] = {choice for choice in alias.choices if isinstance(choice, str)}
        else:
            out[name] = {prefix + name}
    return out


def same(name: str) -> str:
    """A variable's name as the settings match it (case-insensitively unless they say otherwise)."""
    settings = SERVICE.settings
    return name if settings is not None and settings.model_config.get("case_sensitive") else name.upper()


class _Template(yaml.SafeLoader):
    """CloudFormation's short forms (!Ref, !If...) as {"Ref": ...} and the like."""


def _function(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        return {name: loader.construct_scalar(node)}
    if isinstance(node, yaml.SequenceNode):
        return {name: loader.construct_sequence(node, deep=True)}
    assert isinstance(node, yaml.MappingNode), node
    return {name: loader.construct_mapping(node, deep=True)}


_Template.add_multi_constructor("!", _function)


def _named(value: Any, key: str) -> Iterator[str]:
    """Every `Name` of the entries under `value` that have `key`, through !If's branches."""
    if isinstance(value, list):
        for item in value:
            yield from _named(item, key)
    elif isinstance(value, dict):
        if "Name" in value and key in value:
            yield str(value["Name"])
        else:
            for item in value.values():
                yield from _named(item, key)


def on_ecs() -> set[str]:
    template = yaml.load((DEPLOY / "ecs" / "service.yaml").read_text(), Loader=_Template)  # a SafeLoader
    (task,) = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition"]
    (worker,) = [c for c in task["ContainerDefinitions"] if c["Name"] == "worker"]
    names = set(_named(worker.get("Environment", []), "Value")) | set(_named(worker.get("Secrets", []), "ValueFrom"))
    if worker.get("EnvironmentFiles"):
        names |= set(env_file(SETTINGS_FILE))
    return names


def on_kubernetes() -> set[str]:
    objects = [
        doc
        for path in sorted(DEPLOY.glob("k8s/**/*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if isinstance(doc, dict)
    ]
    (workload,) = [o for o in objects if o["kind"] in ("Deployment", "ScaledJob")]
    spec = workload["spec"]
    pod = spec["jobTargetRef"]["template"] if workload["kind"] == "ScaledJob" else spec["template"]
    (worker,) = [c for c in pod["spec"]["containers"] if c["name"] == "worker"]
    names = {str(e["name"]) for e in worker.get("env", [])}
    config_maps = {o["metadata"]["name"]: set(o.get("data", {})) for o in objects if o["kind"] == "ConfigMap"}
    config_maps[SETTINGS_CONFIGMAP] = set(env_file(SETTINGS_FILE))
    secrets: dict[str, set[str]] = {}
    for external in (o for o in objects if o["kind"] == "ExternalSecret"):
        keys = {str(d["secretKey"]) for d in external["spec"].get("data", [])}
        secrets.setdefault(external["spec"]["target"]["name"], set()).update(keys)
    for source in worker.get("envFrom", []):
        if "configMapRef" in source:
            names |= config_maps.get(source["configMapRef"]["name"], set())
        if "secretRef" in source:
            names |= secrets.get(source["secretRef"]["name"], set())
    return names


TARGETS: dict[str, Callable[[], set[str]]] = {
{%- if cookiecutter.deploy_target != 'eks' %}
    "ECS (deploy/ecs/service.yaml)": on_ecs,
{%- endif %}
{%- if cookiecutter.deploy_target != 'ecs' %}
    "Kubernetes (deploy/k8s/)": on_kubernetes,
{%- endif %}
}


@pytest.mark.parametrize("target", list(TARGETS))
def test_every_required_setting_of_yours_reaches_the_worker(target: str) -> None:
    reaching = {same(name) for name in TARGETS[target]()}
    missing = {
        field: sorted(variables)
        for field, variables in required().items()
        if not {same(name) for name in variables} & reaching
    }
    assert not missing, (
        f"on {target} the worker would refuse to start (exit 2) without "
        + ", ".join(f"{' or '.join(v)} (the field {f!r} of Settings)" for f, v in missing.items())
        + ": set it in deploy/settings.env, or make it a secret (deploy/README.md, 'Settings and secrets')"
    )


def test_the_settings_file_is_what_ecs_and_kubectl_read() -> None:
    env_file(SETTINGS_FILE)  # each line KEY=value, a comment, or blank
