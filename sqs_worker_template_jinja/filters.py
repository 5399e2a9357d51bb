"""Jinja filters that write a value out as a file format wants it: `to_yaml(indent)` as block
YAML indented to sit under a key, `to_json` as pretty JSON, keys in the order given."""

from __future__ import annotations

import json
from typing import Any

import yaml


def to_json(value: Any) -> str:
    """Pretty JSON in the order given (Jinja's `tojson` sorts keys and escapes HTML)."""
    return json.dumps(value, indent=2, ensure_ascii=False)


class _Plain(yaml.SafeDumper):
    """Every value written out where it stands: no anchors and aliases for repeated ones."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(value: Any, indent: int = 0) -> str:
    """Block YAML, every line after the first indented by `indent` spaces (the first sits
    where the template puts it)."""
    text = yaml.dump(value, Dumper=_Plain, sort_keys=False, default_flow_style=False, width=1000, allow_unicode=True)
    return text.rstrip("\n").replace("\n", "\n" + " " * indent)
