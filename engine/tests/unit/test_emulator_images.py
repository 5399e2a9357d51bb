"""Which LocalStack runs since its community edition ended (doubles/machine.py): without a
token the pinned 4.14.0 image, the last that starts without one; with LOCALSTACK_AUTH_TOKEN
the image LOCALSTACK_IMAGE names (default `latest`), given the token by name, never by value;
an image that needs the token, named without it, refused in one line naming both variables;
and LocalStack's own runtime on the host, which stays 4.14.0, saying in one line that the
token is the Docker route's and not passing it on. No Docker runs here: `docker run` and the
host runtime's process are stand-ins that record what they were given."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sqs_worker_engine.doubles import emulators
from sqs_worker_engine.doubles import machine as this_machine

TOKEN = "ls-s3cr3t-Value-42"
# The pinned image as the engine names it: its digest is Renovate's to move (rebuilds of the
# same tag only), so the digest itself is not repeated here.
PINNED = emulators.IMAGE


def test_the_pinned_image_is_4_14_0_by_digest() -> None:
    assert re.fullmatch(r"localstack/localstack:4\.14\.0@sha256:[0-9a-f]{64}", PINNED), "the default moved"
    assert this_machine.IMAGE == PINNED and this_machine.VERSION == "4.14.0"


# (environment, the image the Docker route runs)
CHOSEN = [
    ({}, PINNED),
    ({"LOCALSTACK_AUTH_TOKEN": ""}, PINNED),
    ({"LOCALSTACK_AUTH_TOKEN": "  "}, PINNED),
    ({"LOCALSTACK_IMAGE": " "}, PINNED),
    ({"LOCALSTACK_AUTH_TOKEN": TOKEN}, "localstack/localstack:latest"),
    (
        {"LOCALSTACK_AUTH_TOKEN": TOKEN, "LOCALSTACK_IMAGE": "localstack/localstack:2026.4"},
        "localstack/localstack:2026.4",
    ),
    (
        {"LOCALSTACK_AUTH_TOKEN": TOKEN, "LOCALSTACK_IMAGE": "localstack/localstack-pro:4.15"},
        "localstack/localstack-pro:4.15",
    ),
    ({"LOCALSTACK_AUTH_TOKEN": TOKEN, "LOCALSTACK_IMAGE": PINNED}, PINNED),
    # Images that start without a token may be named without one.
    ({"LOCALSTACK_IMAGE": "localstack/localstack:4.14.0"}, "localstack/localstack:4.14.0"),
    ({"LOCALSTACK_IMAGE": "mirror.example/ci/localstack:4.13.1"}, "mirror.example/ci/localstack:4.13.1"),
    ({"LOCALSTACK_IMAGE": "acme/sqs-emulator:1"}, "acme/sqs-emulator:1"),
]


@pytest.mark.parametrize(("environ", "image"), CHOSEN)
def test_the_image_is_the_pinned_one_without_a_token_and_the_named_or_licensed_one_with_it(
    environ: dict[str, str], image: str
) -> None:
    assert this_machine.docker_image(environ) == image


# (image, needs a token)
NEEDS_TOKEN = [
    ("localstack/localstack:4.14.0", False),
    (PINNED, False),
    ("localstack/localstack:4.14", False),
    ("localstack/localstack:3.8.1", False),
    ("localstack/localstack:4.13.1-amd64", False),
    ("registry.example:5000/mirror/localstack:4.14.0", False),
    ("localstack/localstack:4.14.1", True),
    ("localstack/localstack:4.15.0", True),
    ("localstack/localstack:2026.3.0", True),
    ("localstack/localstack:latest", True),
    ("localstack/localstack:stable", True),
    ("localstack/localstack", True),
    ("localstack/localstack@sha256:" + "0" * 64, True),
    ("registry.example:5000/localstack/localstack", True),
    ("localstack/localstack-pro:4.14.0", True),
    ("acme/sqs-emulator:latest", False),
]


@pytest.mark.parametrize(("image", "needed"), NEEDS_TOKEN)
def test_an_image_needs_a_token_unless_it_is_localstacks_up_to_4_14_0(image: str, needed: bool) -> None:
    assert this_machine.needs_token(image) is needed


@pytest.mark.parametrize("image", [image for image, needed in NEEDS_TOKEN if needed])
def test_an_image_that_needs_the_token_named_without_it_is_refused_in_one_line(image: str) -> None:
    for environ in ({"LOCALSTACK_IMAGE": image}, {"LOCALSTACK_IMAGE": image, "LOCALSTACK_AUTH_TOKEN": " "}):
        with pytest.raises(emulators.EmulatorError) as refused:
            this_machine.docker_image(environ)
        said = str(refused.value)
        assert "\n" not in said, said
        assert f"LOCALSTACK_IMAGE={image} needs a LocalStack auth token" in said, said
        assert "set LOCALSTACK_AUTH_TOKEN" in said and "unset LOCALSTACK_IMAGE" in said, said
        assert "4.14.0" in said, said


def test_the_token_goes_into_the_container_by_name_never_by_value() -> None:
    environ = {"LOCALSTACK_AUTH_TOKEN": TOKEN}
    argv = this_machine.docker_command("localstack/localstack:latest", 4570, "sqs,s3", environ)
    assert argv == [
        "docker",
        "run",
        "-d",
        "--rm",
        "-p",
        "127.0.0.1:4570:4566",
        "-e",
        "SERVICES=sqs,s3",
        "-e",
        "LOCALSTACK_AUTH_TOKEN",
        "localstack/localstack:latest",
    ]
    assert not any(TOKEN in arg for arg in argv), f"the token's value is on the command line: {argv}"


def test_without_a_token_the_container_is_given_none() -> None:
    for environ in ({}, {"LOCALSTACK_AUTH_TOKEN": ""}, {"LOCALSTACK_AUTH_TOKEN": " "}):
        argv = this_machine.docker_command(PINNED, 4566, "sqs", environ)
        assert "LOCALSTACK_AUTH_TOKEN" not in " ".join(argv), argv
        assert argv[-1] == PINNED


class DockerRun:
    """`docker run` as subprocess.run sees it: records the command line and what the docker
    client would read from its environment, and answers with a container id."""

    def __init__(self) -> None:
        self.argv: list[str] = []
        self.token_in_env: str | None = None

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        import os

        self.argv = list(argv)
        self.token_in_env = (kwargs.get("env") or os.environ).get("LOCALSTACK_AUTH_TOKEN")
        return subprocess.CompletedProcess(argv, 0, stdout="c0ffee\n", stderr="")


@pytest.fixture
def docker_run(monkeypatch: pytest.MonkeyPatch) -> DockerRun:
    run = DockerRun()
    monkeypatch.setattr(subprocess, "run", run)  # the module emulators calls it from
    monkeypatch.setattr(emulators, "wait_healthy", lambda endpoint, service, timeout: True)
    monkeypatch.delenv("LOCALSTACK_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("LOCALSTACK_IMAGE", raising=False)
    return run


def test_the_docker_route_runs_the_pinned_image_without_a_token(docker_run: DockerRun) -> None:
    started = emulators._start_docker("sqs", 5, 4571, exact=True)
    assert (started.mode, started.container, started.endpoint) == ("docker", "c0ffee", "http://127.0.0.1:4571")
    assert docker_run.argv[-1] == PINNED and "LOCALSTACK_AUTH_TOKEN" not in docker_run.argv


def test_the_docker_route_with_a_token_runs_the_licensed_image_and_hands_the_token_by_name(
    docker_run: DockerRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALSTACK_AUTH_TOKEN", TOKEN)
    emulators._start_docker("sqs", 5, 4571, exact=True)
    assert docker_run.argv[-1] == "localstack/localstack:latest"
    assert docker_run.argv[-3:-1] == ["-e", "LOCALSTACK_AUTH_TOKEN"]
    assert not any(TOKEN in arg for arg in docker_run.argv), docker_run.argv
    assert docker_run.token_in_env == TOKEN, "docker reads the value from the environment it inherits"
    monkeypatch.setenv("LOCALSTACK_IMAGE", "localstack/localstack:2026.4")
    emulators._start_docker("sqs", 5, 4571, exact=True)
    assert docker_run.argv[-1] == "localstack/localstack:2026.4"


def test_the_docker_route_refuses_a_licensed_image_without_the_token_before_docker_runs(
    docker_run: DockerRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALSTACK_IMAGE", "localstack/localstack:latest")
    with pytest.raises(emulators.EmulatorError, match="LOCALSTACK_IMAGE=localstack/localstack:latest needs"):
        emulators._start_docker("sqs", 5, 4571, exact=True)
    assert docker_run.argv == [], "nothing was started"


class SpawnedError(Exception):
    """Raised by the stand-in for LocalStack's runtime process once it has its environment."""


@pytest.fixture
def host_spawn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[dict[str, str]]:
    """LocalStack's own runtime, started on the host: records the environment it is given."""
    given: list[dict[str, str]] = []

    def spawn(argv: list[str], env: dict[str, str], workdir: str, log_path: str) -> None:
        given.append(dict(env))
        raise SpawnedError

    monkeypatch.setattr(emulators, "host_python", lambda: str(tmp_path / "python3.13"))
    monkeypatch.setattr(emulators, "spawn", spawn)
    monkeypatch.delenv("LOCALSTACK_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("LOCALSTACK_IMAGE", raising=False)
    return given


def test_the_host_route_says_in_one_line_that_the_token_is_the_docker_routes_and_keeps_it(
    host_spawn: list[dict[str, str]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOCALSTACK_AUTH_TOKEN", TOKEN)
    with pytest.raises(SpawnedError):
        emulators.start_host(4572)
    said = capsys.readouterr().err.strip()
    assert said.count("\n") == 0 and "Traceback" not in said, said
    assert "LOCALSTACK_AUTH_TOKEN applies to the Docker route only" in said, said
    assert "4.14.0" in said and TOKEN not in said, said
    assert "LOCALSTACK_AUTH_TOKEN" not in host_spawn[0], "LocalStack 4.14.0's runtime is not given the token"


def test_the_host_route_without_the_licensed_variables_says_nothing_of_them(
    host_spawn: list[dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SpawnedError):
        emulators.start_host(4572)
    assert capsys.readouterr().err == ""
    assert host_spawn[0]["GATEWAY_LISTEN"] == "127.0.0.1:4572"


def test_the_host_route_refuses_what_the_docker_route_would(
    host_spawn: list[dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALSTACK_IMAGE", "localstack/localstack:latest")
    with pytest.raises(emulators.EmulatorError, match="needs a LocalStack auth token"):
        emulators.start_host(4572)
    assert host_spawn == [], "nothing was started"


# (environment, what the host route says: None, or a fragment of its line)
HOST_NOTES = [
    ({}, None),
    ({"LOCALSTACK_AUTH_TOKEN": " "}, None),
    ({"LOCALSTACK_AUTH_TOKEN": TOKEN}, "LOCALSTACK_AUTH_TOKEN applies to the Docker route only"),
    ({"LOCALSTACK_IMAGE": PINNED}, "LOCALSTACK_IMAGE applies to the Docker route only"),
    (
        {"LOCALSTACK_AUTH_TOKEN": TOKEN, "LOCALSTACK_IMAGE": "localstack/localstack:latest"},
        "LOCALSTACK_AUTH_TOKEN and LOCALSTACK_IMAGE apply to the Docker route only",
    ),
]


@pytest.mark.parametrize(("environ", "fragment"), HOST_NOTES)
def test_what_the_host_route_says_of_the_licensed_routes_variables(
    environ: dict[str, str], fragment: str | None
) -> None:
    note = this_machine.host_note(environ)
    if fragment is None:
        assert note is None
    else:
        assert note is not None and fragment in note and "\n" not in note, note
