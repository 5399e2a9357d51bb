"""This service, as the worker engine sees it: its name and version, the answers it was
generated with as the defaults of the engine's environment variables, and its own settings.

Every value here is only a default: the environment (the ECS task definition, the
Kubernetes Deployment, docker compose) overrides any of them, and each is validated as
its variable is (README, "Read on": Configuration). Change a default here, or per deployment there.
"""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict
from sqs_worker_engine import ServiceDefaults
from sqs_worker_engine.entry import main as _main

from . import __version__


class Settings(BaseSettings):
    """This service's own settings (the URL of an API it calls, its token), read from the
    environment and validated at boot with the engine's WORKER_* ones, by the same rules: a
    missing or bad value refuses to start (exit 2) naming its variable, secrets and URLs
    never shown; `config` prints them (secrets redacted). Name each field's variable with
    `validation_alias`; handlers read them with `Settings()`, in the lifespan say, which
    cannot fail once the worker has started. README, "Read on": Configuration, "Your own settings".
    """

    model_config = SettingsConfigDict(frozen=True, extra="ignore")

    # For example:
    # api_url: HttpUrl = Field(validation_alias="PARTNER_API_URL")
    # api_token: SecretStr = Field(min_length=20, validation_alias="PARTNER_API_TOKEN")
    # timeout_seconds: float = Field(default=5.0, gt=0, le=60, validation_alias="PARTNER_TIMEOUT_SECONDS")


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
        # Retries that outlast a bad release's rollback at this many attempts (deploy/README.md,
        # "Rolling back"); the engine's default is 10 s.
        "WORKER_RETRY_BASE_SECONDS": "{{ limits.retry_base_outlasting(cookiecutter.max_receive_count | int) }}",
        "WORKER_METRICS_PORT": "{{ cookiecutter.metrics_port | int }}",
        "AWS_REGION": "{{ cookiecutter.aws_region }}",
{%- set concurrency = cookiecutter.worker_concurrency | int %}
{%- set most_in_hand = 100 * limits.MAX_RECEIVE_BATCH %}
{%- if concurrency * 2 > most_in_hand %}
        # The engine's default prefetch (as many as the concurrency) would need more than its
        # 100 pollers a queue ({{ most_in_hand }} messages in hand) at this concurrency: this keeps within them.
        "WORKER_PREFETCH": "{{ most_in_hand - concurrency }}",
{%- endif %}
    },
    settings=Settings,
    # The service's secrets, filled by the deploy files from Secrets Manager or SSM: `config`
    # shows each as set or unset, never its value. Add one here and in deploy/ (README,
    # "Read on": Configuration), or answer `secrets` again with `make upgrade`.
    secrets=({% for name in secrets(cookiecutter) %}"{{ name }}"{% if not loop.last %}, {% elif loop.length == 1 %},{% endif %}{% endfor %}),
)


def main() -> int:
    """The `{{ cookiecutter.project_slug }}` console script."""
    return _main(SERVICE)
