"""The Jinja extension cookiecutter loads for every render (`_extensions` in cookiecutter.json),
`cookiecutter` and `cruft` alike: the package's facts, tables and filters, as the names the
templates and hooks use.

Globals: `limits` (the engine's limits.py) and `limits_file` (its path, for the hooks),
`engine_version`, `engine_source`, `engine_index`, `engine_index_unnamed`,
`engine_index_name`, `index_variables`, `template_origin`, `engine_link`,
`template_doc_link`, `how_to_guides`, `git_credential_helper`, `template_commit`, `worker_policy`,
`payload_bucket_placeholder`, `alerts`, `dashboard`, `emf_metrics`, `emf_dimensions`,
`secrets`, `secret_path`. Filters: `dlq_name`, `partition`, `dns_suffix`, `to_yaml`,
`to_json`, `secret_parameter`.

Each environment imports the helpers as they are on disk when it is made: `cruft update`
renders the commit a service was baked from and then the newest one, in one clone and one
process, and the second render must not run the modules the first one imported.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from jinja2.ext import Extension

from . import alerts, aws, dashboard, emf, filters, guides, source
from .checkout import LIMITS_FILE, ROOT, engine_version, git, load_limits

PACKAGE = __name__.rpartition(".")[0]


def forget_the_helpers() -> None:
    """Drop this package's modules, and the root's local_extensions when it is this
    template's, from sys.modules: the next environment imports them from disk again. An
    environment made already keeps the functions it was given (and the modules they need)."""
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(f"{PACKAGE}.")]:
        del sys.modules[name]
    entry = sys.modules.get("local_extensions")
    if entry is not None and Path(getattr(entry, "__file__", None) or "/").resolve().parent == ROOT:
        del sys.modules["local_extensions"]
    importlib.invalidate_caches()  # a module the new checkout added is found


class EngineExtension(Extension):
    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        limits = load_limits()
        environment.globals["limits"] = limits
        environment.globals["limits_file"] = str(LIMITS_FILE)
        environment.globals["engine_source"] = source.engine_source
        environment.globals["engine_index"] = source.engine_index
        environment.globals["engine_index_unnamed"] = source.engine_index_unnamed
        environment.globals["engine_index_name"] = source.ENGINE_INDEX
        environment.globals["index_variables"] = source.INDEX_VARIABLES
        environment.globals["engine_version"] = engine_version()
        environment.globals["template_origin"] = source.template_origin
        environment.globals["engine_link"] = source.engine_link
        environment.globals["template_doc_link"] = source.template_doc_link
        environment.globals["how_to_guides"] = guides.guides
        environment.globals["git_credential_helper"] = source.GIT_CREDENTIAL_HELPER
        environment.globals["template_commit"] = lambda: git("rev-parse", "HEAD") or ""
        environment.globals["worker_policy"] = aws.worker_policy
        environment.globals["payload_bucket_placeholder"] = aws.PAYLOAD_BUCKET_PLACEHOLDER
        environment.filters["dlq_name"] = limits.dlq_name
        environment.filters["partition"] = aws.partition
        environment.filters["dns_suffix"] = aws.dns_suffix
        environment.filters["to_yaml"] = filters.to_yaml
        environment.filters["to_json"] = filters.to_json
        environment.globals["alerts"] = alerts.alerts
        environment.globals["dashboard"] = dashboard.dashboard
        environment.globals["emf_metrics"] = emf.emf_metrics
        environment.globals["emf_dimensions"] = emf.EMF_DIMENSIONS
        environment.globals["secrets"] = aws.secrets
        environment.globals["secret_path"] = aws.secret_path
        environment.filters["secret_parameter"] = aws.secret_parameter
        forget_the_helpers()
