"""This service's own settings (`Settings` in service.py) are validated at boot with the
engine's WORKER_* ones, by the same rules: what `run`, `config` and the end-to-end test
rely on. When you add a setting without a default, give it a value in the first test below
and in the end-to-end test (`check_service(..., env={...})`); the second test's settings are
an example of its own, which yours never change."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import Field, HttpUrl, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqs_worker_engine import ConfigError, load_settings

from {{ cookiecutter.package_name }}.service import SERVICE, Settings


def test_the_services_own_settings_are_validated_with_the_engines() -> None:
    config = load_settings({}, SERVICE)
    assert isinstance(config.own, Settings)


class Partner(BaseSettings):
    """Settings declared as service.py's example shows, apart from its `Settings`: a field of
    yours, required or reading the same variable, changes neither what this test refuses nor
    its types."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore")
    api_url: HttpUrl = Field(validation_alias="PARTNER_API_URL")
    api_token: SecretStr = Field(min_length=20, validation_alias="PARTNER_API_TOKEN")


def test_a_bad_value_of_your_own_refuses_to_boot_naming_its_variable() -> None:
    service = replace(SERVICE, settings=Partner)
    with pytest.raises(ConfigError) as refused:
        load_settings({"PARTNER_API_URL": "not a url", "PARTNER_API_TOKEN": "too short"}, service)
    assert set(dict(refused.value.problems)) == {"PARTNER_API_URL", "PARTNER_API_TOKEN"}
    assert "too short" not in str(refused.value), "a secret is never shown"
    good = {"PARTNER_API_URL": "https://partner.example.com/v1", "PARTNER_API_TOKEN": "t" * 20}
    config = load_settings(good, service)
    assert isinstance(config.own, Partner) and str(config.own.api_url) == good["PARTNER_API_URL"]
    assert config.describe()["service_settings"]["api_token"] == "**********", "config prints it redacted"
