"""Find or start the SQS emulator that tests and local development talk to (standard library only).

Two emulators, one contract (`ensure()` returns an `Emulator` whose `endpoint` serves SQS, S3,
SNS and EventBridge; `stop()` stops it only if it was started here):

- LocalStack, the default: what the service's users expect, and the one this project's deep
  tests hold the engine to.
- moto's server (`moto[server]` from PyPI): no Docker, no auth token, about a second to start.
  The way out should LocalStack's last free image (see `VERSION`) stop working. Where the two
  differ is measured by the engine's fidelity tests and tabled in
  docs/engine/emulator-fidelity.md.

`SQS_EMULATOR=localstack|moto` chooses (unset: LocalStack). Not a `WORKER_*` name: the worker's
settings refuse unknown ones, and this is a choice of the tooling, not of the worker.
`LOCALSTACK_PORT` (default 4566) is the port on 127.0.0.1 where LocalStack is looked for and
started (moto's server too, when it is set). Order:

1. `AWS_ENDPOINT_URL` is set: use it (it must answer as LocalStack or moto's server, as the one
   SQS_EMULATOR names if set; nothing is started or stopped).
2. moto: start its server (`python -m moto.server`, from the environment running this code)
   on LOCALSTACK_PORT if set and free, else on a free port; stop it afterwards.
3. LocalStack already answering on the port: use it, and say so in one line.
4. A Docker engine answers: run `localstack/localstack:4.14.0` (with LOCALSTACK_AUTH_TOKEN,
   the image LOCALSTACK_IMAGE names, default `latest`: machine.py), stop it afterwards.
5. Otherwise run LocalStack's own runtime on the host (the `localstack-core` package from
   PyPI, in a cached virtualenv on Python 3.13: found, or installed with uv), stop it afterwards.

4.14.0 is pinned on purpose: it is the last LocalStack image usable without an auth token
(from March 2026 `latest` requires one). The host runtime uses the same version, which needs
Python 3.13 (`from warnings import deprecated`): on 3.12 it starts, answers its health check,
and fails every CreateQueue.

Also a command line for Makefiles (the old paths that services baked before 0.6 call run it
too: the package's alias table):
    python -m sqs_worker_engine.doubles.emulators run -- pytest ...   # ensure, run, stop what we started
    python -m sqs_worker_engine.doubles.emulators start | stop       # keep one running for `make dev`

`start` keeps what it started in a state file of its own per project (the directory it runs
in) and port, so `stop` stops only what this project started on that port: never an emulator
it found answering, nor another project's. A start that loses a race for the port to
another emulator stops its own and refuses, rather than hand out the other's endpoint.

What answers at an endpoint, ports and the processes started here are machine.py's.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import pythons
from .machine import IMAGE as IMAGE
from .machine import LOCALSTACK as LOCALSTACK
from .machine import MOTO as MOTO
from .machine import TOKEN_VARIABLE as TOKEN_VARIABLE
from .machine import VERSION as VERSION
from .machine import EmulatorError as EmulatorError
from .machine import LocalStackError as LocalStackError
from .machine import PortTakenError as PortTakenError
from .machine import (
    docker_available,
    docker_command,
    docker_image,
    end_group,
    file_lock,
    host_note,
    missing_services,
    port_free,
    read_from,
    run,
    runs_emulator,
    say,
    spawn,
    wait_healthy,
    wait_identified,
)
from .machine import free_port as free_port
from .machine import healthy as healthy
from .machine import identify as identify
from .machine import local_url as local_url
from .machine import moto_healthy as moto_healthy
from .pythons import python_version

# The switch, and the names it takes.
SWITCH = "SQS_EMULATOR"
KINDS = (LOCALSTACK, MOTO)
# Where LocalStack is looked for and started on this machine (127.0.0.1).
PORT_VARIABLE = "LOCALSTACK_PORT"
DEFAULT_PORT = 4566

# localstack-core 4.14's runtime with the pins it needs on current PyPI.
HOST_PACKAGES = [
    f"localstack-core[runtime]=={VERSION}",
    "cbor2<5.8",
    "pyopenssl<24.3",
    "cryptography<44",
    "service_identity<24.2",
]
# The Python that runtime runs on: its code imports `warnings.deprecated` (new in 3.13); on
# 3.12 it starts and answers its health check, then fails every CreateQueue. Its own image
# runs 3.13, the version it is tested on.
HOST_PYTHON = "3.13"
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
# What LocalStack's log says once its gateway is up, and what it says when the port was taken
# (it then stays up, saying "Ready.", while another process answers on the port).
_READY = "Ready."
_PORT_IN_USE = re.compile(r"CannotListenError|Address already in use|Couldn't listen")


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
        return _name(self.kind)

    def stop(self) -> None:
        if self.mode == "docker" and self.container:
            subprocess.run(["docker", "rm", "-f", self.container], capture_output=True, check=False)
        elif self.mode == "host" and self.pid and (self._proc is not None or runs_emulator(self.pid)):
            end_group(self.pid, self._proc)  # ours: a child, or an earlier `start`'s not reused since
        if self.workdir and self.mode == "host":
            shutil.rmtree(self.workdir, ignore_errors=True)

    def running(self) -> bool:
        """Its process is still there (a container or an endpoint of someone else's: assumed)."""
        if self.mode != "host" or not self.pid:
            return True
        if self._proc is not None:
            return self._proc.poll() is None
        return runs_emulator(self.pid)

    def restart(self, timeout: float = 120) -> None:
        """Stop and start again on the same port (persistence keeps queues when enabled)."""
        if self.mode != "host" or self.kind != LOCALSTACK:
            raise EmulatorError("restart is only supported for a LocalStack started on the host")
        end_group(self.pid or 0, self._proc)
        port = int(self.endpoint.rsplit(":", 1)[1])
        assert self.workdir is not None
        fresh = _start_host(port, self.workdir, self.services, persist=True, timeout=timeout)
        self.pid, self._proc, self.log_path = fresh.pid, fresh._proc, fresh.log_path

    def kill(self) -> None:
        """Stop without cleaning up its state directory (to simulate an outage)."""
        if self.mode == "host" and self.pid:
            end_group(self.pid, self._proc)
        elif self.mode == "docker" and self.container:
            subprocess.run(["docker", "stop", self.container], capture_output=True, check=False)


LocalStack = Emulator  # the name before moto's server joined


def _name(kind: str) -> str:
    return "moto's server" if kind == MOTO else "LocalStack"


def chosen(environ: Mapping[str, str] | None = None) -> str | None:
    """The emulator SQS_EMULATOR names, None when unset; anything else is refused by name."""
    value = (os.environ if environ is None else environ).get(SWITCH, "").strip().lower()
    if not value:
        return None
    if value not in KINDS:
        raise EmulatorError(f"{SWITCH}={value!r} is not an emulator this knows: use one of {', '.join(KINDS)}")
    return value


def chosen_port(environ: Mapping[str, str] | None = None) -> int:
    """The port LOCALSTACK_PORT names (default 4566); anything but a port is refused by name."""
    raw = (os.environ if environ is None else environ).get(PORT_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_PORT
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise EmulatorError(f"{PORT_VARIABLE}={raw!r} is not a port: use a number within 1..65535")
    return int(raw)


def ensure(services: str = SOURCES, timeout: float = 180, emulator: str | None = None) -> Emulator:
    """Return a reachable emulator, starting one if none answers.

    `emulator` ("localstack" or "moto") asks for that one whatever SQS_EMULATOR says, and
    passes over an AWS_ENDPOINT_URL that is the other (a test that measures both does so).
    A LocalStack started here listens on LOCALSTACK_PORT, or on a free port when that one
    is taken (the endpoint says which)."""
    if emulator is not None and emulator not in KINDS:
        raise EmulatorError(f"emulator {emulator!r} is not one this knows: use one of {', '.join(KINDS)}")
    wanted = emulator or chosen()
    configured = os.environ.get("AWS_ENDPOINT_URL")
    first = services.split(",")[0]
    if configured:
        kind = wait_identified(configured, first, 30)
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
    port = chosen_port()
    if wanted == MOTO:
        return start_moto(timeout=min(timeout, 60), port=port if os.environ.get(PORT_VARIABLE) else 0)
    url = local_url(port)
    if healthy(url, first):
        missing = missing_services(url, services)
        if not missing:
            say(f"LocalStack already answers at {url}: using it (not started here, so not stopped here)")
            return Emulator(url, "external", services=services)
        # A LocalStack started for something smaller (SERVICES=sqs): leave it to its owner.
        say(f"LocalStack at {url} runs without {', '.join(missing)}: starting one with {services}")
    if docker_available():
        return _start_docker(services, timeout, port)
    return start_private(services=services, timeout=timeout, port=port)


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
        listen = free_port(port)
        proc = spawn(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(listen)], env, workdir, log_path
        )
        endpoint = local_url(listen)
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
        end_group(proc.pid, proc)
        port = 0
    tail = Path(log_path).read_text(errors="replace")[-3000:]
    shutil.rmtree(workdir, ignore_errors=True)
    raise EmulatorError(f"moto's server did not start:\n{tail}")


def start_private(services: str = SOURCES, persist: bool = False, timeout: float = 180, port: int = 0) -> Emulator:
    """Start a LocalStack of our own on the host, on `port` if it is free, else on a random
    free one. Tests that stop or kill theirs keep the random port: two test runs side by side
    would otherwise both try 4566, and the second would talk to (and kill) the first's."""
    for _ in range(3):  # a free port can be taken between the look and the bind: try another
        try:
            return start_host(free_port(port), services, persist=persist, timeout=timeout)
        except PortTakenError:
            port = 0
    raise EmulatorError("LocalStack could not keep a port: each one it tried was taken while it started")


def start_host(port: int, services: str = SOURCES, persist: bool = False, timeout: float = 180) -> Emulator:
    """Start LocalStack's own runtime on exactly `port`; PortTakenError if another process holds it
    by the time LocalStack binds (nothing of ours is left running then)."""
    note = host_note()  # the licensed route's variables: for Docker only, or refused
    if note:
        say(note)
    workdir = tempfile.mkdtemp(prefix="localstack-")
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
    for var in ("AWS_ENDPOINT_URL", "PYTHONPATH", "VIRTUAL_ENV", TOKEN_VARIABLE):  # 4.14.0 takes no token
        env.pop(var, None)
    log_path = os.path.join(workdir, "localstack.log")
    offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0  # a restart appends
    proc = spawn([python, "-m", "localstack.runtime.main"], env, workdir, log_path)
    endpoint = local_url(port)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        said = read_from(log_path, offset)
        if _PORT_IN_USE.search(said):
            # It says "Ready." all the same and stays up, while whoever holds the port answers
            # every health check: that one is not ours, and this one serves nothing.
            end_group(proc.pid, proc, grace=2)  # TERM is not enough then
            raise PortTakenError(f"port {port} was taken by another process while LocalStack started on it")
        # Ours once its own log says its gateway is up (the bind comes before) and it answers.
        if _READY in said and healthy(endpoint, services.split(",")[0], timeout=1):
            return Emulator(
                endpoint, "host", pid=proc.pid, workdir=workdir, log_path=log_path, services=services, _proc=proc
            )
        time.sleep(0.3)
    end_group(proc.pid, proc)
    tail = read_from(log_path, offset)[-3000:]
    raise EmulatorError(f"LocalStack on the host did not become healthy on {endpoint}:\n{tail}")


def _start_docker(services: str, timeout: float, port: int, exact: bool = False) -> Emulator:
    image = docker_image()  # the pinned one, or a licensed team's (refused without its token)
    port = port if exact else free_port(port)
    out = subprocess.run(docker_command(image, port, services), capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise EmulatorError(f"docker run {image} failed: {out.stderr.strip()}")
    ls = Emulator(local_url(port), "docker", container=out.stdout.strip(), services=services)
    if not wait_healthy(ls.endpoint, services.split(",")[0], timeout):
        ls.stop()
        raise EmulatorError(f"the {image} container did not become healthy on {ls.endpoint}")
    return ls


def host_python() -> str:
    """A virtualenv with localstack-core on Python 3.13, created once per user and reused; one
    built on another Python (earlier engines took 3.12) is built again."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sqs-worker-localstack" / VERSION
    venv = Path(os.environ.get("LOCALSTACK_VENV", cache))
    python = venv / "bin" / "python"
    if _venv_ready(venv):
        return str(python)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(venv.parent / f".{venv.name}.lock"):
        if _venv_ready(venv):
            return str(python)
        base = find_host_python()
        say(f"installing LocalStack {VERSION}'s runtime on Python {HOST_PYTHON} into {venv} (once)")
        shutil.rmtree(venv, ignore_errors=True)
        uv = pythons.uv_command()
        # From the cache's directory: a project's own uv settings (its .python-version, a
        # [tool.uv] that forbids downloads) are not LocalStack's.
        where = str(venv.parent)
        if uv:
            run([uv, "venv", "--quiet", "--python", base, str(venv)], where)
            run([uv, "pip", "install", "--quiet", "--python", str(python), *HOST_PACKAGES], where)
        else:
            run([base, "-m", "venv", str(venv)], where)
            run([str(python), "-m", "pip", "install", "--quiet", *HOST_PACKAGES], where)
        (venv / ".installed").write_text(" ".join(HOST_PACKAGES))
    return str(python)


def _venv_ready(venv: Path) -> bool:
    if not ((venv / ".installed").exists() and (venv / "bin" / "python").exists()):
        return False
    try:
        config = (venv / "pyvenv.cfg").read_text()
    except OSError:
        return False
    # `version` (venv) or `version_info` (uv): the interpreter the environment was made with.
    found = re.search(r"^version(?:_info)?\s*=\s*(\d+\.\d+)", config, re.MULTILINE)
    return found is not None and found.group(1) == HOST_PYTHON


def find_host_python() -> str:
    """A Python 3.13 for LocalStack's runtime: LOCALSTACK_PYTHON, else one found on the
    machine (pythons.py), else one uv installs; else EmulatorError naming what to install."""
    explicit = os.environ.get("LOCALSTACK_PYTHON")
    if explicit:
        version = python_version(explicit)
        if version != HOST_PYTHON:
            raise EmulatorError(
                f"LOCALSTACK_PYTHON={explicit} is {'Python ' + version if version else 'not a Python that runs'}: "
                f"LocalStack {VERSION}'s runtime needs Python {HOST_PYTHON}"
            )
        return explicit
    found, looked = pythons.find(HOST_PYTHON)
    if found:
        return found
    uv = pythons.uv_command()
    installed = ""
    if uv:
        say(
            f"no Python {HOST_PYTHON} found for LocalStack's runtime: installing one with uv python install {HOST_PYTHON}"
        )
        done = subprocess.run(
            [uv, "python", "install", HOST_PYTHON],
            capture_output=True,
            text=True,
            check=False,
            cwd=tempfile.gettempdir(),
        )
        found = pythons.uv_find(uv, "only-managed", HOST_PYTHON)
        if found and python_version(found) == HOST_PYTHON:
            return found
        installed = f" `uv python install {HOST_PYTHON}` failed: {(done.stderr or done.stdout).strip()[-500:]}."
    raise EmulatorError(
        f"no Docker engine answers, and LocalStack {VERSION}'s own runtime needs Python {HOST_PYTHON} "
        f"(it imports warnings.deprecated; on an older Python every CreateQueue fails), which was not found"
        f"{' (tried: ' + '; '.join(looked) + ')' if looked else ''}.{installed} Install one (`uv python install "
        f"{HOST_PYTHON}`, `pyenv install {HOST_PYTHON}`, or your system's python{HOST_PYTHON}) or set LOCALSTACK_PYTHON "
        "to one; or start an emulator yourself and set AWS_ENDPOINT_URL; or use moto's server, which needs "
        f"neither: {SWITCH}=moto."
    )


# -- `start` and `stop`: one emulator kept per project and port ------------------------------


def state_file(port: int, project: Path | None = None) -> Path:
    """Where `start` records what it started for `project` (default: the current directory)
    on `port`: in the temporary directory, one file per user, project and port."""
    where = str((project or Path.cwd()).resolve())
    digest = hashlib.sha256(where.encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"sqs-worker-emulator-{os.getuid()}-{digest}-{port}.json"


def kept(port: int, project: Path | None = None) -> Emulator | None:
    """What an earlier `start` of this project left running on `port`, from its state file."""
    path = state_file(port, project)
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return Emulator(
        state.get("endpoint", ""),
        state["mode"],
        pid=state.get("pid"),
        container=state.get("container"),
        workdir=state.get("workdir"),
        kind=state.get("kind", LOCALSTACK),
    )


def _keep(em: Emulator, port: int) -> None:
    fields = ("mode", "kind", "endpoint", "pid", "container", "workdir")
    record = {name: getattr(em, name) for name in fields} | {"project": str(Path.cwd().resolve()), "port": port}
    state_file(port).write_text(json.dumps(record))


def _kept_elsewhere(port: int) -> list[str]:
    """This project's other kept emulators, as `LOCALSTACK_PORT=N` hints."""
    prefix = state_file(port).name.rsplit("-", 1)[0] + "-"
    found = []
    for path in sorted(Path(tempfile.gettempdir()).glob(prefix + "*.json")):
        other = path.stem.rsplit("-", 1)[1]
        em = kept(int(other)) if other.isdigit() and int(other) != port else None
        if em is not None and em.running():
            found.append(f"{em.name} at {em.endpoint} ({PORT_VARIABLE}={other})")
    return found


def start() -> str:
    """Find or start the emulator `make localstack` and `make dev` keep running; its endpoint."""
    kind = chosen() or LOCALSTACK
    port = chosen_port()
    mine = kept(port)
    if mine is not None:
        if mine.running() and identify(mine.endpoint) == mine.kind:
            if mine.kind != kind:
                raise EmulatorError(
                    f"this project's {mine.name} runs at {mine.endpoint}: set {SWITCH}={mine.kind} to use it "
                    f"(as the command that started it did), or stop it first to start {_name(kind)}"
                )
            say(f"{mine.name} at {mine.endpoint}: started earlier for this project, still running")
            return mine.endpoint
        mine.stop()  # what is left of one that no longer answers
        state_file(port).unlink(missing_ok=True)
    # Named by AWS_ENDPOINT_URL, or moto's server (on a free port unless the port is given):
    # as for the tests. LocalStack: on exactly this port.
    em = ensure() if os.environ.get("AWS_ENDPOINT_URL") or kind == MOTO else _start_localstack(port)
    if em.started_here:
        _keep(em, port)
    elif os.environ.get("AWS_ENDPOINT_URL"):
        say(f"{em.name} at AWS_ENDPOINT_URL={em.endpoint}: using it (not started here, so not stopped here)")
    return em.endpoint


def _start_localstack(port: int) -> Emulator:
    """LocalStack on exactly `port`: the one answering there (said so), or one started there."""
    url = local_url(port)
    found = identify(url)
    taken = found is None and not port_free(port)
    if taken:  # an emulator starting there (another project's start) answers within seconds
        found = wait_identified(url, "sqs", 10)
    if found == LOCALSTACK:
        missing = missing_services(url, SOURCES)
        if missing:
            raise EmulatorError(
                f"LocalStack at {url} runs without {', '.join(missing)}, which this service may need: "
                f"stop it, or choose another port with {PORT_VARIABLE}=<port>"
            )
        say(f"LocalStack already answers at {url}, not started by this project: using it (stop leaves it running)")
        return Emulator(url, "external")
    if found == MOTO:
        raise EmulatorError(
            f"moto's server answers at {url}, not LocalStack: use it with {SWITCH}=moto, "
            f"or choose another port with {PORT_VARIABLE}=<port>"
        )
    if taken:
        raise EmulatorError(
            f"port {port} on 127.0.0.1 is taken by something that is not an SQS emulator: "
            f"choose a free port with {PORT_VARIABLE}=<port>"
        )
    try:
        if docker_available():
            return _start_docker(SOURCES, 180, port, exact=True)
        return start_host(port)
    except PortTakenError:
        raise EmulatorError(
            f"another process took port {port} while LocalStack was starting on it (another project's start, "
            "at the same moment?); this one was stopped, and nothing was created in the other. Run this again "
            f"to use whatever answers there now, or choose a free port with {PORT_VARIABLE}=<port>"
        ) from None


def stop() -> str:
    """Stop what `start` started for this project on LOCALSTACK_PORT; what it says."""
    port = chosen_port()
    mine = kept(port)
    if mine is None:
        others = _kept_elsewhere(port)
        also = f"; it has {', '.join(others)}" if others else ""
        return f"this project started no emulator on port {port}: nothing stopped{also}"
    mine.stop()
    state_file(port).unlink(missing_ok=True)
    return f"stopped {mine.name} at {mine.endpoint}"


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
            print("usage: python -m sqs_worker_engine.doubles.emulators run -- COMMAND...", file=sys.stderr)
            return 2
        em = ensure()
        print(f"{em.name} ({em.mode}) at {em.endpoint}", file=sys.stderr)
        try:
            return subprocess.call(cmd, env={**os.environ, "AWS_ENDPOINT_URL": em.endpoint})
        finally:
            em.stop()
    if command == "start":
        print(start())
        return 0
    if command == "stop":
        say(stop())
        return 0
    print(f"unknown command {command!r}; use run, start or stop", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
