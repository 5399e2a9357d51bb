"""Kubernetes' service links are never read as the worker's settings, whatever their names.

kubelet writes links for every Service of the pod's namespace into each of its containers
(unless the pod sets enableServiceLinks: false). `kubelet_links` below writes them as
kubelet's envvars.FromServices does; for every name the settings model reads, every
Service whose links hold that name is tried, and the configuration must come out as it
would without them: a Service named `worker-metrics` wrote WORKER_METRICS_PORT=tcp://...,
and `config` exited 2 on it."""

from __future__ import annotations

import ipaddress
import re

import pytest

from sqs_worker_engine.process.settings import load_settings, queue_env_key
from sqs_worker_engine.process.settings.fields import ALIASES
from sqs_worker_engine.process.settings.queues import QUEUE_OVERRIDES

from .test_settings import SERVICE

CLUSTER_IPS = ("10.96.0.12", "fd00:10:96::7")
# A Service's name is a DNS label (RFC 1035); a port's name an IANA service name.
SERVICE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
PORT_NAME = re.compile(r"(?=.{1,15}$)(?=.*[a-z])[a-z0-9]+(-[a-z0-9]+)*")


def kubelet_links(service: str, ports: list[tuple[int, str, str]], cluster_ip: str) -> dict[str, str]:
    """The variables kubelet writes for `service` with these (port, name, protocol) and this
    ClusterIP (pkg/kubelet/envvars: FromServices, makeLinkVariables)."""
    prefix = service.upper().replace("-", "_")
    first = ports[0][0]
    links = {f"{prefix}_SERVICE_HOST": cluster_ip, f"{prefix}_SERVICE_PORT": str(first)}
    for port, name, _ in ports:
        if name:
            links[f"{prefix}_SERVICE_PORT_{name.upper().replace('-', '_')}"] = str(port)
    for i, (port, _, protocol) in enumerate(ports):
        address = f"[{cluster_ip}]" if ipaddress.ip_address(cluster_ip).version == 6 else cluster_ip
        url = f"{protocol.lower()}://{address}:{port}"
        if i == 0:
            links[f"{prefix}_PORT"] = url
        at = f"{prefix}_PORT_{port}_{protocol}"
        links |= {at: url, f"{at}_PROTO": protocol.lower(), f"{at}_PORT": str(port), f"{at}_ADDR": cluster_ip}
    return links


def services_writing(variable: str) -> list[dict[str, str]]:
    """The links of every Service (of those `variable` can be read as) that hold `variable`:
    each split of it into a Service's prefix and what kubelet puts after one."""
    written = []
    parts = variable.split("_")
    for cut in range(1, len(parts)):
        service = "-".join(parts[:cut]).lower()
        rest = "_".join(parts[cut:])
        port, name, protocol = 9102, "metrics", "TCP"
        if by_number := re.fullmatch(r"PORT_([1-9][0-9]{0,4})_(TCP|UDP|SCTP)(_[A-Z]+)?", rest):
            port, protocol = int(by_number.group(1)), by_number.group(2)
        if by_name := re.fullmatch(r"SERVICE_PORT_([A-Z0-9_]+)", rest):
            name = by_name.group(1).lower().replace("_", "-")
        if not SERVICE_NAME.fullmatch(service) or not PORT_NAME.fullmatch(name) or not 0 < port < 65536:
            continue
        for cluster_ip in CLUSTER_IPS:
            links = kubelet_links(service, [(port, name, protocol)], cluster_ip)
            if variable in links:
                written.append(links)
    return written


# A queue whose per-queue key ends in SERVICE_PORT: a Service `worker-queue-orders` with a
# port named `concurrency` writes WORKER_QUEUE_ORDERS_SERVICE_PORT_CONCURRENCY=9102.
QUEUES = "orders-service-port,receipts"
PER_QUEUE = [f"WORKER_QUEUE_{queue_env_key(q)}_{s}" for q in QUEUES.split(",") for s in QUEUE_OVERRIDES]


@pytest.mark.parametrize("variable", sorted(ALIASES) + PER_QUEUE)
def test_no_setting_is_read_from_a_service_link_of_its_name(variable: str) -> None:
    base = {"WORKER_QUEUES": QUEUES}
    expected = load_settings(base, SERVICE).describe()
    for links in services_writing(variable):
        described = load_settings({**links, **base}, SERVICE).describe()
        assert described == expected, f"{variable}={links[variable]} was read as a setting"


def test_the_names_kubelet_can_write_are_found() -> None:
    """The test above tries something: WORKER_METRICS_PORT (a Service `worker-metrics`) and
    a per-queue setting after SERVICE_PORT are names kubelet writes; most names are not."""
    writable = {v for v in sorted(ALIASES) + PER_QUEUE if services_writing(v)}
    assert {"WORKER_METRICS_PORT", "WORKER_QUEUE_ORDERS_SERVICE_PORT_CONCURRENCY"} <= writable, writable
    assert "WORKER_CONCURRENCY" not in writable and "WORKER_QUEUE_RECEIPTS_CONCURRENCY" not in writable
    (links, _) = services_writing("WORKER_METRICS_PORT")
    assert links["WORKER_METRICS_PORT"] == "tcp://10.96.0.12:9102", links


def test_a_setting_given_beside_a_link_is_read_as_ever() -> None:
    """A value set in the pod spec replaces kubelet's link of the same name; a value no link
    has is the setting, and refused when bad."""
    links = kubelet_links("worker-metrics", [(9102, "metrics", "TCP")], "10.0.0.11")
    config = load_settings({**links, "WORKER_METRICS_PORT": "9200"}, SERVICE)
    assert config.settings.metrics_port == 9200
    with pytest.raises(Exception, match="WORKER_METRICS_PORT"):
        load_settings({**links, "WORKER_METRICS_PORT": "tcp://db.internal:9102"}, SERVICE)
