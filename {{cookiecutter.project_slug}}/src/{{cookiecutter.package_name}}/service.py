"""This service, as the worker engine sees it: its name and version, and the answers it was
generated with as the defaults of the engine's environment variables.

Every value here is only a default: the environment (the ECS task definition, the
Kubernetes Deployment, docker compose) overrides any of them, and each is validated as
its variable is (README: "Configuration"). Change a default here, or per deployment there.
"""

from __future__ import annotations

from sqs_worker_engine import ServiceDefaults
from sqs_worker_engine.entry import main as _main

from . import __version__

SERVICE = ServiceDefaults(
    name="{{ cookiecutter.project_slug }}",
    version=__version__,
    command="python -m {{ cookiecutter.package_name }}",
    environ={
        "WORKER_QUEUES": "{{ cookiecutter.queue_name }}",
        "WORKER_HANDLERS": "{{ cookiecutter.package_name }}.handlers:router",
        "WORKER_CONCURRENCY": "{{ cookiecutter.worker_concurrency | int }}",
        "WORKER_VISIBILITY_TIMEOUT_SECONDS": "{{ cookiecutter.visibility_timeout_seconds | int }}",
        "WORKER_JOB_TIMEOUT_MS": "{{ cookiecutter.job_timeout_seconds | int * 1000 }}",
        "WORKER_SHUTDOWN_TIMEOUT_MS": "{{ cookiecutter.shutdown_timeout_seconds | int * 1000 }}",
        "WORKER_MAX_RECEIVE_COUNT": "{{ cookiecutter.max_receive_count | int }}",
        "WORKER_METRICS_PORT": "{{ cookiecutter.metrics_port | int }}",
        "AWS_REGION": "{{ cookiecutter.aws_region }}",
    },
    # The service's secrets, filled by the deploy files from Secrets Manager or SSM: `config`
    # shows each as set or unset, never its value. Add one here and in deploy/ (README:
    # "Configuration"), or answer `secrets` again with `make upgrade`.
    secrets=({% for name in secrets(cookiecutter) %}"{{ name }}"{% if not loop.last %}, {% elif loop.length == 1 %},{% endif %}{% endfor %}),
)


def main() -> int:
    """The `{{ cookiecutter.project_slug }}` console script."""
    return _main(SERVICE)
