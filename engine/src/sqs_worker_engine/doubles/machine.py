"""This machine's side of the emulators (standard library only): which one answers at an
endpoint (`identify`), free ports, the processes started here (each in a session of its
own, ended with its whole group) and their logs, a Docker engine and the LocalStack image it
runs (`docker_image`, `docker_command`), a lock file; and how an emulator that cannot be had
is refused (`EmulatorError`, naming what to do).

LocalStack's images since its community edition ended (March 2026): 4.14.0, pinned by digest
(`IMAGE`), is the last one that starts without an auth token, and it gets no fixes. A team
with a licence sets LOCALSTACK_AUTH_TOKEN: the Docker route then runs the image
LOCALSTACK_IMAGE names (default `localstack/localstack:latest`, the one image LocalStack
publishes now, which refuses to start without the token), and hands the container the token
by name (`-e LOCALSTACK_AUTH_TOKEN`: docker reads its value from its own environment), never
by value on a command line that `ps` shows. An image that needs the token, named without it,
is refused before anything starts. LocalStack's own runtime on the host stays at 4.14.0
(`localstack-core` from PyPI): the token is not passed to it, and it says so in one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

# The emulators `identify` tells apart (SQS_EMULATOR's names).
LOCALSTACK = "localstack"
MOTO = "moto"

# Last LocalStack image usable without an auth token; see the module docstring.
# By digest as well as tag: a tag can be moved, a digest cannot (the template's compose file
# and CI pin the same image). Written out whole, as "name:tag@digest", so that the template's
# Renovate configuration finds it (its rebuilt digests only: renovate.json).
IMAGE = "localstack/localstack:4.14.0@sha256:3ebc37595918b8accb852f8048fef2aff047d465167edd655528065b07bc364a"
VERSION = IMAGE.split(":")[1].split("@")[0]
# A licensed team's route: the token, passed into the container by name, and the image it runs.
TOKEN_VARIABLE = "LOCALSTACK_AUTH_TOKEN"  # noqa: S105 (the variable's name, never its value)
IMAGE_VARIABLE = "LOCALSTACK_IMAGE"
# The newest image: from March 2026 every LocalStack release (`latest` among them) needs the
# token. A team that wants its tests to stay put pins a tag of its own with LOCALSTACK_IMAGE.
LICENSED_IMAGE = "localstack/localstack:latest"
# A LocalStack tag that is a version (4.14.0, 4.14, 4.13.1-amd64); the rest (latest, stable,
# a digest alone) float, or cannot be told.
_VERSION_TAG = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?(?:-[\w.]+)?")


class EmulatorError(RuntimeError):
    """No emulator could be found or started; the message says what to do."""


LocalStackError = EmulatorError  # the name before moto's server joined


class PortTakenError(EmulatorError):
    """Another process took the port while an emulator was starting on it."""


def local_url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def healthy(endpoint: str, service: str = "sqs", timeout: float = 2.0) -> bool:
    """LocalStack answers, with `service` up."""
    try:
        with urllib.request.urlopen(f"{endpoint.rstrip('/')}/_localstack/health", timeout=timeout) as r:
            data = json.load(r)
    except (OSError, ValueError):
        return False
    return data.get("services", {}).get(service) in ("available", "running")


def moto_healthy(endpoint: str, timeout: float = 2.0) -> bool:
    """moto's server answers (its own API: a JSON dump of what it holds)."""
    try:
        with urllib.request.urlopen(f"{endpoint.rstrip('/')}/moto-api/data.json", timeout=timeout) as r:
            json.load(r)
    except (OSError, ValueError):
        return False
    return True


def identify(endpoint: str, service: str = "sqs", timeout: float = 2.0) -> str | None:
    """Which emulator answers at `endpoint` ("localstack", "moto"), None if neither does."""
    if healthy(endpoint, service, timeout):
        return LOCALSTACK
    if moto_healthy(endpoint, timeout):
        return MOTO
    return None


def spawn(argv: list[str], env: Mapping[str, str], workdir: str, log_path: str) -> subprocess.Popen[bytes]:
    """An emulator's process, in a session of its own (so that its whole group can be ended)
    and writing to the end of its log."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def docker_available() -> bool:
    if not shutil.which("docker") or os.environ.get("LOCALSTACK_NO_DOCKER"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=15, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def wait_healthy(endpoint: str, service: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if healthy(endpoint, service):
            return True
        time.sleep(0.5)
    return False


def wait_identified(endpoint: str, service: str, timeout: float) -> str | None:
    deadline = time.monotonic() + timeout
    while True:
        kind = identify(endpoint, service)
        if kind is not None or time.monotonic() > deadline:
            return kind
        time.sleep(0.5)


def missing_services(endpoint: str, services: str) -> list[str]:
    return [s for s in services.split(",")[1:] if not healthy(endpoint, s)]


# Ports free_port picked in this process. The system may pick one again as soon as the
# probe closes it, before its first user binds it: two workers started one after the other
# were given the same metrics port, and the second could not start.
_PICKED: set[int] = set()
PICK_ATTEMPTS = 100


def free_port(preferred: int = 0) -> int:
    """`preferred` if it is free on 127.0.0.1, else one the system picks that this process
    was not given before (which may still be taken by another process before its user binds
    it: callers that can, retry)."""
    if preferred and port_free(preferred):
        return preferred
    for _ in range(PICK_ATTEMPTS):
        try:
            with bound(0) as s:
                port = int(s.getsockname()[1])
        except OSError as exc:
            raise EmulatorError(f"no free port: {exc}") from None
        if port not in _PICKED:
            _PICKED.add(port)
            return port
    raise EmulatorError(f"no free port this process was not given before, in {PICK_ATTEMPTS} tries")


def port_free(port: int) -> bool:
    """Nothing listens on `port` of 127.0.0.1. As servers bind (SO_REUSEADDR): the connections
    of one stopped a moment ago, still in TIME_WAIT, do not hold the port."""
    try:
        with bound(port):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def bound(port: int) -> Iterator[socket.socket]:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        yield s


def end_group(pid: int, proc: subprocess.Popen[bytes] | None, grace: float = 30) -> None:
    """Stop the process group `pid` leads: SIGTERM, then SIGKILL after `grace` seconds (a
    LocalStack that could not bind its port ignores SIGTERM)."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        if wait_gone(pid, proc, wait):
            return


def wait_gone(pid: int, proc: subprocess.Popen[bytes] | None, timeout: float) -> bool:
    if proc is not None:  # our child: reaped, so that its pid is gone
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return True  # the pid is someone else's now: ours is gone
        time.sleep(0.1)
    return False


def runs_emulator(pid: int) -> bool:
    """`pid` is alive and runs an emulator (not a process that got the number since)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's process: never ours
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # no /proc (macOS): ps says
        command = subprocess.run(
            ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, check=False
        ).stdout
    return "localstack.runtime.main" in command or "moto.server" in command


def read_from(path: str, offset: int) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def run(cmd: list[str], cwd: str | None = None) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=cwd)
    if result.returncode != 0:
        raise EmulatorError(f"{' '.join(cmd)} failed:\n{result.stdout}{result.stderr}")


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    import fcntl

    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# -- LocalStack's image: the pinned free one, or with LOCALSTACK_AUTH_TOKEN the licensed one --


def _token(environ: Mapping[str, str]) -> bool:
    return bool(environ.get(TOKEN_VARIABLE, "").strip())


def needs_token(image: str) -> bool:
    """Whether a LocalStack image starts only with an auth token: LocalStack's (its
    repository's last part `localstack`, or `localstack-pro`) unless its tag is a version up to
    4.14.0. Any other repository (a team's own build) is not LocalStack's to judge."""
    name = image.split("@", 1)[0]
    repository, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "")
    last = repository.rsplit("/", 1)[-1]
    if last == "localstack-pro":
        return True
    if last != "localstack":
        return False
    version = _VERSION_TAG.fullmatch(tag)
    if version is None:  # latest, stable, no tag, or a digest alone
        return True
    release = tuple(int(part or 0) for part in version.groups())
    return release > tuple(int(part) for part in VERSION.split("."))


def docker_image(environ: Mapping[str, str] | None = None) -> str:
    """The LocalStack image a Docker engine runs: LOCALSTACK_IMAGE if set, else with
    LOCALSTACK_AUTH_TOKEN the licensed image, else the pinned free one. An image that needs
    the token, named without it, is refused (EmulatorError naming both variables)."""
    env = os.environ if environ is None else environ
    named = env.get(IMAGE_VARIABLE, "").strip()
    if not named:
        return LICENSED_IMAGE if _token(env) else IMAGE
    if needs_token(named) and not _token(env):
        raise EmulatorError(
            f"{IMAGE_VARIABLE}={named} needs a LocalStack auth token, and {TOKEN_VARIABLE} is not set: "
            f"set {TOKEN_VARIABLE} (a licensed team's), or unset {IMAGE_VARIABLE} for LocalStack {VERSION}, "
            "the last image that starts without one"
        )
    return named


def docker_command(image: str, port: int, services: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """`docker run` for LocalStack `image` on 127.0.0.1:`port`. With LOCALSTACK_AUTH_TOKEN set,
    the token goes in by name only: docker takes the value from its own environment (which is
    this one's), so no command line, `ps` or log shows it."""
    env = os.environ if environ is None else environ
    token = ["-e", TOKEN_VARIABLE] if _token(env) else []
    return ["docker", "run", "-d", "--rm", "-p", f"127.0.0.1:{port}:4566", "-e", f"SERVICES={services}", *token, image]


def host_note(environ: Mapping[str, str] | None = None) -> str | None:
    """What LocalStack's own runtime on the host says of the licensed route's variables (one
    line), None when neither is set. The host runs 4.14.0 whatever they say; a combination
    the Docker route would refuse is refused here too, so the same setting never works on one
    machine and fails on the next."""
    env = os.environ if environ is None else environ
    named = [var for var in (TOKEN_VARIABLE, IMAGE_VARIABLE) if env.get(var, "").strip()]
    if not named:
        return None
    docker_image(env)
    return (
        f"{' and '.join(named)} {'apply' if len(named) > 1 else 'applies'} to the Docker route only: "
        f"LocalStack's own runtime here is {VERSION}, which needs no token (the token is not passed to it)"
    )
