"""Kubernetes' service links: what kubelet writes into every container of a pod for each
Service of its namespace (unless the pod sets enableServiceLinks: false), told apart from
settings by name and value together.

A Service's links are named after it, so a Service whose name starts like a setting
(`worker-metrics`, `worker-queue`) gives variables of the engine's own prefixes, and one
of them may even be a setting's name (`WORKER_METRICS_PORT=tcp://10.0.0.11:9102`).
loading.py drops every link before it reads any of the engine's settings; a variable of
a link's name whose value is not a link's is left to be read, or refused, as a setting.
"""

from __future__ import annotations

import ipaddress
import re

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
