"""The READMEs are tests: what a generated service's docs say runs, for every supported
answer set of tests/matrix.py, on the bakes the test_artifacts_* files make (conftest's `projects`).

- Every Python block of the bake's README.md and deploy/README.md runs, as the script a
  reader would save it as (pytest-markdown-docs, with tests/readme_examples.py making each
  block `__main__`), against the suite's LocalStack, in an AWS account of its own (LocalStack
  takes a 12-digit access key id as the account) where the service's own `bootstrap` made
  its queues first: the producer example sends, and SQS holds every message it sent.
- The engine's README runs the same way.
- Every command of the docs names only what the bake renders (tests/doc_commands.py): files,
  Kubernetes kinds, names and containers, stack parameters and outputs, make targets.

They run with the suite's interpreter and the bake's src/ on the path (as the artifact tests
import a bake), not in an environment per bake: the bake's own `make test` (test_bake.py)
installs one for the answer sets that run it.
"""

from __future__ import annotations

import re
import secrets
import sys
from pathlib import Path

import boto3
import pytest
from conftest import ROOT, run
from doc_commands import problems
from markdown_it import MarkdownIt
from matrix import SHAPES, SUPPORTED

TESTS = Path(__file__).resolve().parent
# What the producer example sends when run: one task, a batch of two, and one from sync code.
SENT_BY_THE_PRODUCER_EXAMPLE = 4


def python_blocks(readme: Path) -> int:
    """How many Python blocks pytest-markdown-docs should find (a `notest` block aside)."""
    fences = [t for t in MarkdownIt().parse(readme.read_text()) if t.type == "fence"]
    return sum(1 for t in fences if t.info.split()[:1] == ["python"] and "notest" not in t.info.split())


def private_account() -> dict[str, str]:
    """Credentials for an account of this test's own on the shared LocalStack."""
    return {"AWS_ACCESS_KEY_ID": str(secrets.randbelow(9 * 10**11) + 10**11), "AWS_SECRET_ACCESS_KEY": "test"}


def run_markdown(docs: list[Path], cwd: Path, tmp_path: Path, **env: str) -> str:
    """The Python blocks of `docs`, each run by pytest-markdown-docs as a script; the output."""
    ini = tmp_path / "pytest.ini"  # the suite's own configuration and plugins stay out of it
    ini.write_text("[pytest]\n")
    argv = [sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", str(cwd), "-p", "no:cacheprovider"]
    argv += ["-p", "readme_examples", "--markdown-docs", "-q", *map(str, docs)]
    result = run(argv, cwd, timeout=300, PYTHONDONTWRITEBYTECODE="1", **env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"a README example fails:\n{output[-6000:]}"
    return output


@pytest.mark.parametrize("key", list(SHAPES))
def test_every_python_example_of_the_readmes_runs(
    projects: dict[str, Path], key: str, localstack_endpoint: str, tmp_path: Path
) -> None:
    project, answers = projects[key], SUPPORTED[key].answers
    (package,) = [p.name for p in (project / "src").iterdir() if p.is_dir()]
    region = answers.get("aws_region", "us-east-1")
    env = {
        **private_account(),
        "AWS_ENDPOINT_URL": localstack_endpoint,
        "AWS_REGION": region,
        "PYTHONPATH": f"{project / 'src'}:{TESTS}",
    }
    if answers.get("large_payloads") == "yes":  # the example offloads to the service's bucket
        env["WORKER_LARGE_PAYLOAD_BUCKET"] = f"readme-{env['AWS_ACCESS_KEY_ID']}"
    made = run([sys.executable, "-m", package, "bootstrap"], project, timeout=120, **env)
    assert made.returncode == 0, made.stdout + made.stderr
    # `queue <name>: <url> (DLQ ...)`: the service's own queue, as bootstrap made it.
    (queue,) = re.findall(r"^queue \S+: (\S+)", made.stdout, re.MULTILINE)

    docs = [project / "README.md", project / "deploy" / "README.md"]
    output = run_markdown(docs, project, tmp_path, **env)
    blocks = sum(python_blocks(doc) for doc in docs)
    assert blocks >= 8 and f"{blocks} passed" in output, f"{blocks} Python blocks, yet:\n{output[-3000:]}"

    sqs = boto3.client(
        "sqs",
        endpoint_url=localstack_endpoint,
        region_name=region,
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key="test",
    )
    held = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["ApproximateNumberOfMessages"])
    count = int(held["Attributes"]["ApproximateNumberOfMessages"])
    assert count == SENT_BY_THE_PRODUCER_EXAMPLE, f"the producer example sent {count} messages to {queue}"


def test_every_python_example_of_the_engine_readme_runs(localstack_endpoint: str, tmp_path: Path) -> None:
    readme = ROOT / "engine" / "README.md"
    env = {**private_account(), "AWS_ENDPOINT_URL": localstack_endpoint, "PYTHONPATH": str(TESTS)}
    output = run_markdown([readme], ROOT / "engine", tmp_path, **env)
    blocks = python_blocks(readme)
    assert blocks >= 5 and f"{blocks} passed" in output, output[-3000:]


@pytest.mark.parametrize("key", list(SUPPORTED))
def test_the_docs_commands_name_only_what_the_bake_renders(projects: dict[str, Path], key: str) -> None:
    found = problems(projects[key])
    assert not found, "\n".join(found)


@pytest.mark.parametrize("key", list(SUPPORTED))
def test_a_fifo_bakes_readme_says_what_message_groups_do_to_scaling(projects: dict[str, Path], key: str) -> None:
    """Replicas beyond the groups with messages waiting receive nothing, and the fleet
    simulator runs a FIFO queue as a standard one: a FIFO bake's owner reads both where
    `make simulate` and the autoscaling are explained, a standard bake's owner neither."""
    readme = " ".join((projects[key] / "README.md").read_text().split())
    section = readme.split("## Scaling the fleet", 1)[1].split(" ## ", 1)[0]
    fifo = SUPPORTED[key].answers.get("queue_name", "").endswith(".fifo")
    said = "On this FIFO queue, SQS hands a message group's messages to one consumer at a time" in section
    assert said == fifo, key
    assert ("`make simulate` runs a FIFO queue as a standard one" in section) == fifo, key
