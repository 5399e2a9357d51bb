"""A service's own settings (an API's URL, its token) go through the same refusal as the
WORKER_* ones: validated at boot, every bad variable named at once (exit 2, no traceback),
secrets never shown, printed by `config` redacted."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from pydantic import AliasChoices, Field, HttpUrl, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from sqs_worker_engine import cli
from sqs_worker_engine.process.settings import ConfigError, ServiceDefaults, WorkerConfig, load_settings
from sqs_worker_engine.process.settings.fields import own_variables


class Partner(BaseSettings):
    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="PARTNER_")

    api_url: HttpUrl = Field(validation_alias="PARTNER_API_URL")
    api_token: SecretStr = Field(min_length=8, validation_alias=AliasChoices("PARTNER_API_TOKEN", "PARTNER_TOKEN"))
    timeout_seconds: float = Field(default=5.0, gt=0, le=60)  # PARTNER_TIMEOUT_SECONDS, from the prefix


SERVICE = ServiceDefaults(
    name="orders-worker",
    command="python -m orders_worker",
    environ={"WORKER_QUEUES": "orders", "PARTNER_TIMEOUT_SECONDS": "2"},
    settings=Partner,
)
GOOD = {"PARTNER_API_URL": "https://partner.example.com/v1", "PARTNER_API_TOKEN": "s3cret-token-value"}


def problems(environ: dict[str, str]) -> dict[str, str]:
    with pytest.raises(ConfigError) as refused:
        load_settings(environ, SERVICE)
    return dict(refused.value.problems)


def test_the_variables_are_the_aliases_or_the_prefixed_names() -> None:
    assert own_variables(Partner) == {
        "PARTNER_API_URL": "PARTNER_API_URL",
        "PARTNER_API_TOKEN": "PARTNER_API_TOKEN",
        "PARTNER_TOKEN": "PARTNER_TOKEN",
        "PARTNER_TIMEOUT_SECONDS": "timeout_seconds",
    }


def test_valid_settings_are_the_configs_own_and_a_services_defaults_apply() -> None:
    config = load_settings(GOOD, SERVICE)
    assert isinstance(config.own, Partner)
    assert str(config.own.api_url) == "https://partner.example.com/v1"
    assert config.own.timeout_seconds == 2.0, "the service's default of its own variable"
    printed = json.dumps(config.describe())
    assert "s3cret-token-value" not in printed
    assert config.describe()["service_settings"]["api_token"] == "**********"


def test_every_bad_variable_is_named_at_once_with_the_engines() -> None:
    found = problems({"PARTNER_API_URL": "not a url", "PARTNER_API_TOKEN": "short", "WORKER_CONCURRENCY": "many"})
    assert set(found) == {"PARTNER_API_URL", "PARTNER_API_TOKEN", "WORKER_CONCURRENCY"}, found
    assert "not a url" not in found["PARTNER_API_URL"] and "short" not in found["PARTNER_API_TOKEN"], found
    assert "at least 8" in found["PARTNER_API_TOKEN"], found
    assert problems({})["PARTNER_API_URL"] == "Field required"
    assert problems({**GOOD, "PARTNER_TIMEOUT_SECONDS": "90"})["PARTNER_TIMEOUT_SECONDS"].endswith("(got '90')")


def test_the_services_defaults_may_name_only_variables_someone_reads() -> None:
    with pytest.raises(ValueError, match="unknown settings: PARTNER_API_URI"):
        replace(SERVICE, environ={"PARTNER_API_URI": "https://x"})


def test_config_refuses_with_exit_2_naming_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("PARTNER_API_URL", "PARTNER_API_TOKEN", "PARTNER_TOKEN", "PARTNER_TIMEOUT_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PARTNER_API_TOKEN", "tok")
    assert cli.main(SERVICE, ["config"]) == cli.EXIT_CONFIG
    err = capsys.readouterr().err
    assert "PARTNER_API_URL: Field required" in err and "PARTNER_API_TOKEN: Value should have at least 8" in err, err
    assert "tok'" not in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv", [["send"], ["bootstrap"], ["dlq", "peek"], ["redrive"], ["healthcheck"]], ids=lambda a: " ".join(a)
)
def test_commands_that_only_talk_to_sqs_do_not_read_the_services_own_settings(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An owner with a required setting of their own (PARTNER_API_URL) unset on a laptop:
    `make send` and the DLQ tools were refused (exit 2, "PARTNER_API_URL: Field required")
    though none of them runs a handler. `run` and `config` still refuse."""
    for name in ("PARTNER_API_URL", "PARTNER_API_TOKEN", "PARTNER_TOKEN", "PARTNER_TIMEOUT_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    seen: list[object] = []

    def command(config: WorkerConfig, args: object) -> int:
        seen.append(config.own)
        return 0

    monkeypatch.setitem(cli.COMMANDS, argv[0], command)
    assert cli.main(SERVICE, argv) == 0
    assert seen == [None], "the command got a config without the service's own settings"
    assert cli.main(SERVICE, ["config"]) == cli.EXIT_CONFIG
