"""The emulator starter's choices that need no emulator: the port LOCALSTACK_PORT names, the
Python LocalStack's own runtime is given (3.13, found past pyenv's shims, or installed with
uv, or refused naming what to install), and the cached runtime built on another Python is
built again. Interpreters, pyenv and uv are stand-in scripts on a PATH of the test's own."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from sqs_worker_engine.doubles import emulators, pythons
from sqs_worker_engine.doubles import machine as this_machine


def script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def interpreter(path: Path, version: str) -> Path:
    """A stand-in Python that answers the version question as `version` would."""
    return script(path, f'echo "{version}"\n')


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH with nothing on it but what a test puts in tmp_path/bin."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("mkdir", "touch", "chmod", "dirname"):  # what the stand-in scripts use
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("LOCALSTACK_PYTHON", raising=False)
    monkeypatch.delenv("UV", raising=False)
    return bin_dir


def pyenv(bin_dir: Path, root: Path, versions: dict[str, str]) -> None:
    """pyenv with these versions installed (name -> what its python answers); its python3.13
    shim runs nothing, as under a project whose .python-version names 3.12."""
    for name, answers in versions.items():
        interpreter(root / name / "bin" / "python", answers)
    listing = " ".join(versions)
    script(
        bin_dir / "pyenv",
        f'case "$1" in versions) for v in {listing}; do echo $v; done;; prefix) echo "{root}/$2";; esac\n',
    )
    script(bin_dir / "python3.13", 'echo "pyenv: python3.13: command not found" >&2; exit 127\n')


def test_the_port_is_localstack_port_or_4566_and_anything_else_is_refused_by_name() -> None:
    assert emulators.chosen_port({}) == 4566
    assert emulators.chosen_port({"LOCALSTACK_PORT": " 4570 "}) == 4570
    for bad in ("0", "65536", "45a", "-1", "4566.0"):
        with pytest.raises(emulators.EmulatorError, match=rf"LOCALSTACK_PORT='{bad}' is not a port"):
            emulators.chosen_port({"LOCALSTACK_PORT": bad})


def test_pyenvs_313_is_found_past_a_shim_that_runs_nothing(machine: Path, tmp_path: Path) -> None:
    root = tmp_path / "pyenv-versions"
    pyenv(machine, root, {"3.12.1": "3.12", "3.13.0": "3.13"})
    interpreter(machine / "python3.12", "3.12")
    assert emulators.find_host_python() == str(root / "3.13.0" / "bin" / "python")


def test_without_313_anywhere_uv_installs_one(machine: Path, tmp_path: Path) -> None:
    pyenv(machine, tmp_path / "pyenv-versions", {"3.12.1": "3.12"})
    managed = tmp_path / "uv-python" / "cpython-3.13" / "bin" / "python3.13"
    installed = tmp_path / "installed"
    # uv: `python find` knows no 3.13 until `python install 3.13` has run.
    script(
        machine / "uv",
        f'if [ "$1 $2" = "python install" ]; then touch "{installed}"; interp="{managed}"; '
        f'mkdir -p "$(dirname "$interp")"; printf \'#!/bin/sh\\necho 3.13\\n\' > "$interp"; chmod +x "$interp"; exit 0; fi\n'
        f'if [ "$1 $2" = "python find" ] && [ -e "{installed}" ]; then echo "{managed}"; exit 0; fi\n'
        "exit 2\n",
    )
    assert emulators.find_host_python() == str(managed)
    assert installed.exists(), "uv python install 3.13 ran"


def test_with_no_313_and_no_uv_the_refusal_names_what_to_install(machine: Path, tmp_path: Path) -> None:
    pyenv(machine, tmp_path / "pyenv-versions", {"3.12.1": "3.12"})
    with pytest.raises(emulators.EmulatorError) as refused:
        emulators.find_host_python()
    text = str(refused.value)
    for said in (
        "needs Python 3.13",
        "uv python install 3.13",
        "pyenv install 3.13",
        "LOCALSTACK_PYTHON",
        "SQS_EMULATOR=moto",
    ):
        assert said in text, f"{said!r} not in: {text}"
    assert "python3.13 (does not run)" in text, "the shim that runs nothing is named as tried"


def test_localstack_python_must_be_313(machine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = interpreter(tmp_path / "py312", "3.12")
    monkeypatch.setenv("LOCALSTACK_PYTHON", str(old))
    with pytest.raises(emulators.EmulatorError, match=rf"LOCALSTACK_PYTHON={old} is Python 3.12: .* needs Python 3.13"):
        emulators.find_host_python()
    good = interpreter(tmp_path / "py313", "3.13")
    monkeypatch.setenv("LOCALSTACK_PYTHON", str(good))
    assert emulators.find_host_python() == str(good)


def cached_runtime(venv: Path, made_with: str) -> None:
    interpreter(venv / "bin" / "python", made_with)
    (venv / "pyvenv.cfg").write_text(f"home = /somewhere\nversion_info = {made_with}.1\n")
    (venv / ".installed").write_text("localstack-core")


def test_a_cached_runtime_built_on_312_is_built_again_on_313(
    machine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = tmp_path / "cache" / "runtime"
    monkeypatch.setenv("LOCALSTACK_VENV", str(venv))
    cached_runtime(venv, "3.12")
    base = interpreter(tmp_path / "py313", "3.13")
    monkeypatch.setattr(emulators, "find_host_python", lambda: str(base))
    monkeypatch.setattr(pythons, "uv_command", lambda: "uv")
    ran: list[list[str]] = []

    def run(cmd: list[str], cwd: str | None = None) -> None:
        ran.append(cmd)
        if cmd[1] == "venv":  # what `uv venv` leaves behind
            cached_runtime(venv, "3.13")

    monkeypatch.setattr(emulators, "run", run)
    assert emulators.host_python() == str(venv / "bin" / "python")
    assert ran[0] == ["uv", "venv", "--quiet", "--python", str(base), str(venv)]
    assert ran[1][:4] == ["uv", "pip", "install", "--quiet"] and emulators.HOST_PACKAGES[0] in ran[1]
    ran.clear()
    assert emulators.host_python() == str(venv / "bin" / "python")
    assert ran == [], "a runtime on 3.13 is reused as it is"


def test_the_state_is_per_project_and_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    one, other = tmp_path / "one", tmp_path / "other"
    one.mkdir()
    other.mkdir()
    files = {emulators.state_file(port, project) for port in (4566, 4570) for project in (one, other)}
    assert len(files) == 4
    assert all(path.parent == tmp_path and f"-{os.getuid()}-" in path.name for path in files)


def test_a_port_the_system_picks_twice_is_given_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The system may pick a port again as soon as the probe closes it, before its first
    user binds it (a chaos run gave two workers one metrics port, and the second could not
    start). Here it picks 40941, 40941, then 40942: the second caller gets 40942."""
    import contextlib
    from collections.abc import Iterator

    picks = iter([40941, 40941, 40942])

    class Probe:
        def __init__(self, port: int) -> None:
            self.port = port

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    @contextlib.contextmanager
    def bound(port: int) -> Iterator[Probe]:
        yield Probe(port or next(picks))

    monkeypatch.setattr(this_machine, "bound", bound)
    monkeypatch.setattr(this_machine, "_PICKED", set(), raising=False)  # none picked before this test
    assert [emulators.free_port(), emulators.free_port()] == [40941, 40942]


def test_another_emulator_of_this_project_is_refused_naming_how_to_use_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make send` after `SQS_EMULATOR=moto make dev`, without the variable: the refusal names
    the variable that reaches the running one, as well as how to start the other."""
    running = emulators.Emulator("http://127.0.0.1:38057", "host", kind=emulators.MOTO)
    monkeypatch.delenv(emulators.SWITCH, raising=False)
    monkeypatch.setattr(emulators, "kept", lambda port, project=None: running)
    monkeypatch.setattr(emulators, "identify", lambda endpoint, *args, **kwargs: emulators.MOTO)
    with pytest.raises(emulators.EmulatorError) as refused:
        emulators.start()
    said = str(refused.value)
    assert "moto's server runs at http://127.0.0.1:38057" in said
    assert f"{emulators.SWITCH}=moto" in said and "LocalStack" in said, said
