"""Find or start the SQS emulator that tests and local development talk to (standard library only).

Two emulators, one contract (`ensure()` returns an `Emulator` whose `endpoint` serves SQS, S3,
SNS and EventBridge; `stop()` stops it only if it was started here):

- LocalStack, the default: what the service's users expect, and the one this project's deep
  tests hold the engine to.
- moto's server (`moto[server]` from PyPI): no Docker, no auth token, about a second to start.
  The way out should LocalStack's last free image (see `VERSION`) stop working. Where the two
  differ is measured by the engine's fidelity tests and tabled in its README.

`SQS_EMULATOR=localstack|moto` chooses (unset: LocalStack). Not a `WORKER_*` name: the worker's
settings refuse unknown ones, and this is a choice of the tooling, not of the worker. Order:

1. `AWS_ENDPOINT_URL` is set: use it (it must answer as LocalStack or moto's server, as the one
   SQS_EMULATOR names if set; nothing is started or stopped).
2. moto: start its server on a free port of this machine (`python -m moto.server`, from the
   environment running this code), stop it afterwards.
3. LocalStack already answering on http://127.0.0.1:4566: use it.
4. A Docker engine answers: run `localstack/localstack:4.14.0`, stop it afterwards.
5. Otherwise run LocalStack's own runtime on the host (the `localstack-core` package from
   PyPI, in a cached virtualenv on Python 3.12+), stop it afterwards.

4.14.0 is pinned on purpose: it is the last LocalStack image usable without an auth token
(from March 2026 `latest` requires one). The host runtime uses the same version.

Also a command line for Makefiles (`sqs_worker_engine.localstack` is the same, under its old name):
    python -m sqs_worker_engine.emulators run -- pytest ...   # ensure, run, stop what we started
    python -m sqs_worker_engine.emulators start | stop       # keep one running for `make dev`
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# The switch, and the names it takes.
SWITCH = "SQS_EMULATOR"
LOCALSTACK = "localstack"
MOTO = "moto"
KINDS = (LOCALSTACK, MOTO)

VERSION = "4.14.0"
# Last LocalStack image usable without an auth token; see the module docstring.
# By digest as well as tag: a tag can be moved, a digest cannot (the template's compose file
# and CI pin the same image).
IMAGE = f"localstack/localstack:{VERSION}@sha256:3ebc37595918b8accb852f8048fef2aff047d465167edd655528065b07bc364a"
# localstack-core 4.14's runtime with the pins it needs on current PyPI.
HOST_PACKAGES = [
    f"localstack-core[runtime]=={VERSION}",
    "cbor2<5.8",
    "pyopenssl<24.3",
    "cryptography<44",
    "service_identity<24.2",
]
DEFAULT_URL = "http://127.0.0.1:4566"
# What `start` left running for `stop` (the name it had when only LocalStack was started).
STATE_FILE = Path(tempfile.gettempdir()) / f"localstack-{os.getuid()}-tests.json"


class EmulatorError(RuntimeError):
    """No emulator could be found or started; the message says what to do."""


LocalStackError = EmulatorError  # the name before moto's server joined


# SQS and what feeds queues in the wild (SNS, S3 notifications and large payloads,
# EventBridge); LocalStack loads each on first use, so naming them costs nothing until then.
# moto's server serves every service it has, whatever this says.
SOURCES = "sqs,sns,s3,events"


@dataclass
class Emulator:
    """A reachable emulator; `stop()` stops it only if we started it."""

    endpoint: str
    mode: str  # "external", "docker" or "host"
    pid: int | None = None
    container: str | None = None
    workdir: str | None = None
    log_path: str | None = None
    services: str = SOURCES
    kind: str = LOCALSTACK
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def started_here(self) -> bool:
        return self.mode != "external"

    @property
    def name(self) -> str:
        return "moto's server" if self.kind == MOTO else "LocalStack"

    def stop(self) -> None:
        if self.mode == "docker" and self.container:
            subprocess.run(["docker", "rm", "-f", self.container], capture_output=True, check=False)
        elif self.mode == "host" and self.pid:
            _kill_group(self.pid)
            if self._proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(timeout=30)
            else:  # started by an earlier `start` (not our child): wait until it is gone
                _wait_gone(self.pid, 30)
        if self.workdir and self.mode == "host":
            shutil.rmtree(self.workdir, ignore_errors=True)

    def restart(self, timeout: float = 120) -> None:
        """Stop and start again on the same port (persistence keeps queues when enabled)."""
        if self.mode != "host" or self.kind != LOCALSTACK:
            raise EmulatorError("restart is only supported for a LocalStack started on the host")
        _kill_group(self.pid or 0)
        if self._proc is not None:
            self._proc.wait(timeout=30)
        port = int(self.endpoint.rsplit(":", 1)[1])
        assert self.workdir is not None
        fresh = _start_host(port, self.workdir, self.services, persist=True, timeout=timeout)
        self.pid, self._proc, self.log_path = fresh.pid, fresh._proc, fresh.log_path

    def kill(self) -> None:
        """Stop without cleaning up its state directory (to simulate an outage)."""
        if self.mode == "host" and self.pid:
            _kill_group(self.pid)
            if self._proc is not None:
                self._proc.wait(timeout=30)
        elif self.mode == "docker" and self.container:
            subprocess.run(["docker", "stop", self.container], capture_output=True, check=False)


LocalStack = Emulator  # the name before moto's server joined


def chosen(environ: dict[str, str] | None = None) -> str | None:
    """The emulator SQS_EMULATOR names, None when unset; anything else is refused by name."""
    value = (os.environ if environ is None else environ).get(SWITCH, "").strip().lower()
    if not value:
        return None
    if value not in KINDS:
        raise EmulatorError(f"{SWITCH}={value!r} is not an emulator this knows: use one of {', '.join(KINDS)}")
    return value


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


def ensure(services: str = SOURCES, timeout: float = 180, emulator: str | None = None) -> Emulator:
    """Return a reachable emulator, starting one if none answers.

    `emulator` ("localstack" or "moto") asks for that one whatever SQS_EMULATOR says, and
    passes over an AWS_ENDPOINT_URL that is the other (a test that measures both does so)."""
    if emulator is not None and emulator not in KINDS:
        raise EmulatorError(f"emulator {emulator!r} is not one this knows: use one of {', '.join(KINDS)}")
    wanted = emulator or chosen()
    configured = os.environ.get("AWS_ENDPOINT_URL")
    first = services.split(",")[0]
    if configured:
        kind = _wait_identified(configured, first, 30)
        if kind is None:
            raise EmulatorError(
                f"AWS_ENDPOINT_URL={configured} answers neither as LocalStack (/_localstack/health for {first}) "
                "nor as moto's server (/moto-api/)"
            )
        if wanted in (None, kind):
            return Emulator(configured, "external", services=services, kind=kind)
        if emulator is None:
            raise EmulatorError(
                f"{SWITCH}={wanted} but AWS_ENDPOINT_URL={configured} is {kind}: unset one of them, or make them agree"
            )
    if wanted == MOTO:
        return start_moto(timeout=min(timeout, 60))
    if healthy(DEFAULT_URL, first):
        missing = [s for s in services.split(",")[1:] if not healthy(DEFAULT_URL, s)]
        if not missing:
            return Emulator(DEFAULT_URL, "external", services=services)
        # A LocalStack started for something smaller (SERVICES=sqs): leave it to its owner.
        print(
            f"LocalStack at {DEFAULT_URL} runs without {', '.join(missing)}: starting one with {services}",
            file=sys.stderr,
        )
    if _docker_available():
        return _start_docker(services, timeout)
    return start_private(services=services, timeout=timeout, port=4566)


def start_moto(timeout: float = 60, port: int = 0) -> Emulator:
    """Start moto's server on the host, on `port` if it is free, else on a random free one.
    It runs from the environment running this code, which must have `moto[server]`."""
    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
        raise EmulatorError(
            f"{SWITCH}=moto needs moto's server in this environment ({sys.executable}): "
            "install 'moto[server]' (a dev dependency of the generated service and of the engine)"
        )
    workdir = tempfile.mkdtemp(prefix="moto-")
    log_path = os.path.join(workdir, "moto.log")
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_ENDPOINT_URL", "PYTHONPATH")}
    for _ in range(3):  # a free port can be taken between the look and the bind: try another
        chosen_port = free_port(port)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(chosen_port)],
                env=env,
                cwd=workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        endpoint = f"http://127.0.0.1:{chosen_port}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            # Ours only once its own log says it bound the port: another server that took the
            # port meanwhile would answer the health check too.
            bound = f"Running on {endpoint}" in Path(log_path).read_text(errors="replace")
            if bound and moto_healthy(endpoint, timeout=1):
                return Emulator(
                    endpoint, "host", pid=proc.pid, workdir=workdir, log_path=log_path, kind=MOTO, _proc=proc
                )
            time.sleep(0.2)
        _kill_group(proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        port = 0
    tail = Path(log_path).read_text(errors="replace")[-3000:]
    shutil.rmtree(workdir, ignore_errors=True)
    raise EmulatorError(f"moto's server did not start:\n{tail}")


def start_private(services: str = SOURCES, persist: bool = False, timeout: float = 180, port: int = 0) -> Emulator:
    """Start a LocalStack of our own on the host, on `port` if it is free, else on a random
    free one. Tests that stop or kill theirs keep the random port: two test runs side by side
    would otherwise both try 4566, and the second would talk to (and kill) the first's."""
    workdir = tempfile.mkdtemp(prefix="localstack-")
    port = free_port(port)
    try:
        return _start_host(port, workdir, services, persist=persist, timeout=timeout)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise


def _start_host(port: int, workdir: str, services: str, persist: bool, timeout: float) -> Emulator:
    python = host_python()
    env = {
        **os.environ,
        "GATEWAY_LISTEN": f"127.0.0.1:{port}",
        "SERVICES": services,
        "DNS_ADDRESS": "0",
        "LOCALSTACK_VOLUME_DIR": workdir,
        "SKIP_SSL_CERT_DOWNLOAD": "1",
        "DISABLE_EVENTS": "1",
        "PERSISTENCE": "1" if persist else "0",
    }
    for var in ("AWS_ENDPOINT_URL", "PYTHONPATH", "VIRTUAL_ENV"):
        env.pop(var, None)
    log_path = os.path.join(workdir, "localstack.log")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [python, "-m", "localstack.runtime.main"],
            env=env,
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break  # it could not start (its port taken meanwhile, say): whoever answers is not ours
        if healthy(endpoint, services.split(",")[0], timeout=1):
            return Emulator(
                endpoint, "host", pid=proc.pid, workdir=workdir, log_path=log_path, services=services, _proc=proc
            )
        time.sleep(0.3)
    _kill_group(proc.pid)
    tail = Path(log_path).read_text(errors="replace")[-3000:]
    raise EmulatorError(f"LocalStack on the host did not become healthy on {endpoint}:\n{tail}")


def _start_docker(services: str, timeout: float) -> Emulator:
    port = free_port(4566)
    out = subprocess.run(
        ["docker", "run", "-d", "--rm", "-p", f"127.0.0.1:{port}:4566", "-e", f"SERVICES={services}", IMAGE],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise EmulatorError(f"docker run {IMAGE} failed: {out.stderr.strip()}")
    ls = Emulator(f"http://127.0.0.1:{port}", "docker", container=out.stdout.strip(), services=services)
    if not _wait_healthy(ls.endpoint, services.split(",")[0], timeout):
        ls.stop()
        raise EmulatorError(f"the {IMAGE} container did not become healthy on {ls.endpoint}")
    return ls


def host_python() -> str:
    """A virtualenv with localstack-core, created once per user and reused (LocalStack needs 3.12+)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sqs-worker-localstack" / VERSION
    venv = Path(os.environ.get("LOCALSTACK_VENV", cache))
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    if marker.exists() and python.exists():
        return str(python)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(venv.parent / f".{venv.name}.lock"):
        if marker.exists() and python.exists():
            return str(python)
        base = _find_python_312()
        shutil.rmtree(venv, ignore_errors=True)
        uv = shutil.which("uv")
        if uv:
            _run([uv, "venv", "--quiet", "--python", base, str(venv)])
            _run([uv, "pip", "install", "--quiet", "--python", str(python), *HOST_PACKAGES])
        else:
            _run([base, "-m", "venv", str(venv)])
            _run([str(python), "-m", "pip", "install", "--quiet", *HOST_PACKAGES])
        marker.write_text(" ".join(HOST_PACKAGES))
    return str(python)


def _find_python_312() -> str:
    candidates: list[str] = []
    if os.environ.get("LOCALSTACK_PYTHON"):
        candidates.append(os.environ["LOCALSTACK_PYTHON"])
    candidates += [p for p in (shutil.which("python3.13"), shutil.which("python3.12")) if p]
    if shutil.which("pyenv"):
        out = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True, check=False).stdout
        for version in sorted(out.split(), reverse=True):
            if version.startswith(("3.13", "3.12")) and version.replace(".", "").isdigit():
                prefix = subprocess.run(
                    ["pyenv", "prefix", version], capture_output=True, text=True, check=False
                ).stdout.strip()
                if prefix:
                    candidates.append(os.path.join(prefix, "bin", "python"))
    uv = shutil.which("uv")
    if uv:
        found = subprocess.run(
            [uv, "python", "find", ">=3.12"], capture_output=True, text=True, check=False
        ).stdout.strip()
        if found:
            candidates.append(found)
    for candidate in candidates:
        ok = subprocess.run(
            [candidate, "-c", "import sys, venv; sys.exit(sys.version_info < (3, 12))"],
            capture_output=True,
            check=False,
        )
        if ok.returncode == 0:
            return candidate
    if uv and subprocess.run([uv, "python", "install", "3.13"], capture_output=True, check=False).returncode == 0:
        return subprocess.run([uv, "python", "find", "3.13"], capture_output=True, text=True, check=True).stdout.strip()
    raise EmulatorError(
        "no LocalStack reachable and none can be started: no Docker engine answers and no Python 3.12+ "
        "was found for LocalStack's host runtime. Start LocalStack yourself and set AWS_ENDPOINT_URL, "
        "or install Python 3.12+ (set LOCALSTACK_PYTHON to its path)."
    )


def _docker_available() -> bool:
    if not shutil.which("docker") or os.environ.get("LOCALSTACK_NO_DOCKER"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=15, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _wait_healthy(endpoint: str, service: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if healthy(endpoint, service):
            return True
        time.sleep(0.5)
    return False


def _wait_identified(endpoint: str, service: str, timeout: float) -> str | None:
    deadline = time.monotonic() + timeout
    while True:
        kind = identify(endpoint, service)
        if kind is not None or time.monotonic() > deadline:
            return kind
        time.sleep(0.5)


def free_port(preferred: int = 0) -> int:
    """`preferred` if it is free on 127.0.0.1, else one the system picks (which may be taken
    again before its user binds it: callers that can, retry)."""
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise EmulatorError("no free port")


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            return  # the pid is someone else's now: ours is gone
        time.sleep(0.1)


def _run(cmd: list[str]) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise EmulatorError(f"{' '.join(cmd)} failed:\n{result.stdout}{result.stderr}")


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    import fcntl

    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "run"
    try:
        return _command(command, argv)
    except EmulatorError as e:
        print(e, file=sys.stderr)
        return 1


def _command(command: str, argv: list[str]) -> int:
    if command == "run":
        cmd = argv[argv.index("--") + 1 :] if "--" in argv else []
        if not cmd:
            print("usage: python -m sqs_worker_engine.emulators run -- COMMAND...", file=sys.stderr)
            return 2
        em = ensure()
        print(f"{em.name} ({em.mode}) at {em.endpoint}", file=sys.stderr)
        try:
            return subprocess.call(cmd, env={**os.environ, "AWS_ENDPOINT_URL": em.endpoint})
        finally:
            em.stop()
    if command == "start":
        kept = _kept()
        if kept is not None and kept.kind == (chosen() or LOCALSTACK) and identify(kept.endpoint) == kept.kind:
            print(kept.endpoint)  # the one an earlier `start` left running
            return 0
        em = ensure()
        if em.started_here:
            STATE_FILE.write_text(
                json.dumps(
                    {
                        "mode": em.mode,
                        "kind": em.kind,
                        "endpoint": em.endpoint,
                        "pid": em.pid,
                        "container": em.container,
                        "workdir": em.workdir,
                    }
                )
            )
        print(em.endpoint)
        return 0
    if command == "stop":
        kept = _kept()
        if kept is not None:
            kept.stop()
            STATE_FILE.unlink()
        return 0
    print(f"unknown command {command!r}; use run, start or stop", file=sys.stderr)
    return 2


def _kept() -> Emulator | None:
    """What an earlier `start` left running, from its state file."""
    if not STATE_FILE.exists():
        return None
    state = json.loads(STATE_FILE.read_text())
    return Emulator(
        state.get("endpoint", ""),
        state["mode"],
        pid=state["pid"],
        container=state["container"],
        workdir=state["workdir"],
        kind=state.get("kind", LOCALSTACK),
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
