"""The READMEs are tests: what a generated service's docs say runs, for every supported
answer set of tests/matrix.py, on the bakes the test_artifacts_* files make (conftest's `projects`).

- Every Python block of the bake's README.md and deploy/README.md runs, as the script a
  reader would save it as (pytest-markdown-docs, with tests/readme_examples.py making each
  block `__main__`), against the suite's LocalStack, in an AWS account of its own (LocalStack
  takes a 12-digit access key id as the account) where the service's own `bootstrap` made
  its queues first: the producer example sends, and SQS holds every message it sent. The
  README keeps the examples that import the service's package (the example handler, a
  handler test, the producer); the rest moved to the docs site's pages, which run in
  test_docs_site.py.
- The engine's README runs the same way.
- The README is a front page: at most 300 lines for every answer set, and every page of the
  docs site it names (the service's pages, the how-to guides of the answers it was baked
  with and of no others) exists, with the heading it names.
- Every command of the docs names only what the bake renders (tests/doc_commands.py): files,
  Kubernetes kinds, names and containers, stack parameters and outputs, make targets; the
  docs site's pages the README links included.

They run with the suite's interpreter and the bake's src/ on the path (as the artifact tests
import a bake), not in an environment per bake: the bake's own `make test` (test_bake.py)
installs one for the answer sets that run it.
"""

from __future__ import annotations

import json
import re
import secrets
import sys
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest
from artifacts import ANSWERS
from conftest import ROOT, run
from doc_commands import commands, problems, site_links, words
from markdown_it import MarkdownIt
from matrix import SHAPES, SUPPORTED
from validators import PLACEHOLDER_ACCOUNT, load_cfn, load_k8s

from sqs_worker_template_jinja.aws import secret_parameter
from sqs_worker_template_jinja.guides import ANSWERS as GUIDES

TESTS = Path(__file__).resolve().parent
# What the producer example sends when run: one task, a batch of two, and one from sync code.
SENT_BY_THE_PRODUCER_EXAMPLE = 4
# The README's Python blocks: the example handler, a handler test and the producer (with
# use_idempotency=yes, the idempotent handler too); deploy/README.md has none.
README_BLOCKS = 3
README_MOST_LINES = 300


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
    assert blocks >= README_BLOCKS and f"{blocks} passed" in output, f"{blocks} Python blocks, yet:\n{output[-3000:]}"

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
    """The README is the engine's overview: it keeps one example that runs (a handler tried
    without AWS); the examples of docs/engine/ run in test_docs_site.py, as these did."""
    readme = ROOT / "engine" / "README.md"
    env = {**private_account(), "AWS_ENDPOINT_URL": localstack_endpoint, "PYTHONPATH": str(TESTS)}
    output = run_markdown([readme], ROOT / "engine", tmp_path, AWS_REGION="us-east-1", **env)
    blocks = python_blocks(readme)
    assert blocks >= 1 and f"{blocks} passed" in output, output[-3000:]


@pytest.mark.parametrize("key", list(SUPPORTED))
def test_the_docs_commands_name_only_what_the_bake_renders(projects: dict[str, Path], key: str) -> None:
    found = problems(projects[key])
    assert not found, "\n".join(found)


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings, as MkDocs' toc and GitHub make them."""
    tokens = MarkdownIt().parse(page.read_text())
    titles = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    return {re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", title.lower()).strip()) for title in titles}


def page_section(page: Path, heading: str) -> str:
    """A `## heading` section of a docs page, its whitespace folded."""
    text = page.read_text()
    assert f"\n## {heading}\n" in text, f"{page.relative_to(ROOT)} has no section {heading!r}"
    return " ".join(text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0].split())


def baked_answers(project: Path) -> dict[str, str]:
    """Every answer a bake was made with, defaults included, as .cruft.json records them."""
    context = json.loads((project / ".cruft.json").read_text())["context"]["cookiecutter"]
    return {name: str(value) for name, value in context.items() if not name.startswith("_")}


@pytest.mark.parametrize("key", list(SUPPORTED))
def test_the_readme_is_a_front_page_whose_docs_site_pages_exist(projects: dict[str, Path], key: str) -> None:
    """What the service is, its daily commands, its example handler and its own numbers, in at
    most 300 lines whatever the answers; the rest is on the docs site's pages it names, each
    of which exists in the repository (a heading too, where it names one): every page of the
    service's section, and the how-to guide of each answer it was baked with other than the
    default, and of no other answer."""
    project = projects[key]
    readme = (project / "README.md").read_text()
    lines = len(readme.splitlines())
    assert lines <= README_MOST_LINES, f"README.md is {lines} lines, over {README_MOST_LINES}"

    linked = site_links(readme)
    assert len(linked) >= 15, f"the README names only {linked} of the docs site"
    for doc, anchor in linked:
        page = ROOT / doc
        assert page.is_file(), f"the README names {doc}, which the repository does not have"
        assert not anchor or anchor in anchors(page), f"the README names {doc}#{anchor}: no such heading"
    named = {doc for doc, _ in linked}
    service = {f"docs/service/{page.name}" for page in (ROOT / "docs" / "service").glob("*.md")}
    assert service <= named, f"the README leaves out {sorted(service - named)}"

    # Each guide's answer, read from the bake's own record of its answers; a Kubernetes
    # answer counts where the bake has Kubernetes files.
    answers = baked_answers(project)
    kubernetes = (project / "deploy" / "k8s").is_dir()
    baked = set()
    for guide in GUIDES:
        value = answers[guide.variable]
        holds = value.endswith(guide.answer) if guide.variable == "queue_name" else value == guide.answer
        if holds and (kubernetes or guide.variable not in ("kubernetes_workload", "eks_identity")):
            baked.add(guide.doc)
    guides = {doc for doc in named if doc.startswith("docs/how-to/") and doc != "docs/how-to/index.md"}
    assert guides == baked, f"the README links the guides {sorted(guides)}, its answers' are {sorted(baked)}"
    if answers["queue_name"].endswith(".fifo"):
        assert "docs/how-to/fifo.md" in guides, "a FIFO queue's guide must be linked"


@pytest.mark.parametrize("key", list(SUPPORTED))
def test_a_fifo_bakes_readme_says_what_message_groups_do_to_scaling(projects: dict[str, Path], key: str) -> None:
    """Replicas beyond the groups with messages waiting receive nothing, and the fleet
    simulator runs a FIFO queue as a standard one: a FIFO bake's owner is led to both where
    the README points to `make simulate` and the autoscaling (the FIFO guide's section, linked
    beside the page on the fleet), a standard bake's owner to neither: the page on the fleet,
    which every README links, leaves them to the FIFO guide."""
    readme = (projects[key] / "README.md").read_text()
    fifo = SUPPORTED[key].answers.get("queue_name", "").endswith(".fifo")
    (fleet_line,) = [line for line in readme.splitlines() if ("docs/service/fleet.md", "") in site_links(line)]
    scaling = ("docs/how-to/fifo.md", "scaling-and-message-groups")
    assert (scaling in site_links(fleet_line)) == fifo, (key, fleet_line)
    assert (scaling in site_links(readme)) == fifo, key

    section = page_section(ROOT / "docs" / "how-to" / "fifo.md", "Scaling and message groups")
    assert "On a FIFO queue, SQS hands a message group's messages to one consumer at a time" in section
    assert "`make simulate` runs a FIFO queue as a standard one" in section
    fleet = " ".join((ROOT / "docs" / "service" / "fleet.md").read_text().split())
    assert "one consumer at a time" not in fleet and "runs a FIFO queue as a standard one" not in fleet
    assert "(../how-to/fifo.md#scaling-and-message-groups)" in fleet


def ordered_commands(project: Path) -> list[list[str]]:
    """deploy/README.md's commands in the order a reader runs them, each split into words."""
    return [words(command) for command in commands((project / "deploy" / "README.md").read_text())]


def first(listed: list[list[str]], predicate: Callable[[list[str]], bool], what: str) -> int:
    found = [i for i, argv in enumerate(listed) if predicate(argv)]
    assert found, f"deploy/README.md has no step that {what}"
    return found[0]


def exported(listed: list[list[str]], before: int, variable: str) -> list[str]:
    """The command whose output `export VARIABLE=$(...)` keeps, among the first `before`."""
    for argv in listed[:before]:
        if argv[:1] == ["export"] and argv[1].startswith(f"{variable}=$("):
            return [argv[1].split("$(", 1)[1], *argv[2:]]
    raise AssertionError(f"deploy/README.md sets ${variable} in no step before it is used")


ECS_KEYS = [key for key in SUPPORTED if ANSWERS[key].ecs]
EKS_KEYS = [key for key in SUPPORTED if ANSWERS[key].eks]


@pytest.mark.parametrize("key", ECS_KEYS)
def test_the_first_ecs_service_deploy_passes_the_secrets_settings_and_alarms_made_before_it(
    projects: dict[str, Path], key: str
) -> None:
    """The deploy that starts the first task is the one that must carry every secret, the
    settings file and the alarm topic: a task without a required setting exits 2, and a
    parameter passed only in a later section was passed too late."""
    project, answers = projects[key], ANSWERS[key]
    listed = ordered_commands(project)
    at = first(
        listed,
        lambda argv: argv[:3] == ["aws", "cloudformation", "deploy"] and "deploy/ecs/service.yaml" in argv,
        "deploys the service",
    )
    deploy = listed[at]
    given = dict(w.split("=", 1) for w in deploy[deploy.index("--parameter-overrides") + 1 :] if "=" in w)
    needed = {secret_parameter(name) for name in answers.secrets} | {
        "AlarmTopicArn",
        "DeadLetterAlarmName",
        "SettingsFileArn",
    }
    assert needed <= set(given), f"the first service deploy leaves out {sorted(needed - set(given))}"

    # Each secret: created by an earlier step, its ARN read back by the name it was created under.
    created = {
        argv[argv.index("--name") + 1] for argv in listed[:at] if argv[:3] == ["aws", "secretsmanager", "create-secret"]
    }
    for name in answers.secrets:
        read = re.findall(
            rf"{secret_parameter(name)}=\$\(aws secretsmanager describe-secret --secret-id (\S+)", " ".join(deploy)
        )
        assert read and read[0] in created, f"{name}: its secret {read} is not created before the deploy ({created})"

    # The settings: uploaded before, to the very object the stack is given.
    copied = [argv for argv in listed[:at] if argv[:3] == ["aws", "s3", "cp"] and argv[3] == "deploy/settings.env"]
    assert copied, "deploy/settings.env is not uploaded before the service deploy"
    destination = copied[0][4].removeprefix("s3://")
    # ...to a bucket a step makes first: the steps' commands followed in order (prose that
    # mentions `aws s3 mb` runs nothing) had no bucket to copy to.
    steps = [words(c) for c in commands((project / "deploy" / "README.md").read_text(), blocks_only=True)]
    bucket = destination.split("/", 1)[0]
    upload = steps.index(copied[0])
    made = [argv for argv in steps[:upload] if argv[:3] == ["aws", "s3", "mb"] and argv[3:4] == [f"s3://{bucket}"]]
    assert made, f"no step makes the bucket {bucket} before deploy/settings.env is copied to it"
    arn = given["SettingsFileArn"]
    assert re.fullmatch(rf"arn:aws[a-z-]*:s3:::{re.escape(destination)}", arn), f"uploads {destination}, passes {arn}"
    stack = load_cfn(project / "deploy" / "ecs" / "service.yaml")
    pattern = stack["Parameters"]["SettingsFileArn"]["AllowedPattern"]
    example = arn.replace("$SETTINGS_BUCKET", "change-me-settings-bucket")
    assert re.fullmatch(pattern, example), f"{example} fails the stack's own pattern {pattern}"

    # The alarm topic: made by SNS in an earlier step; the dead-letter alarm: the queues stack's output.
    assert given["AlarmTopicArn"] == "$ALARM_TOPIC"
    assert exported(listed, at, "ALARM_TOPIC")[:3] == ["aws", "sns", "create-topic"]
    assert given["DeadLetterAlarmName"] == "$DEAD_LETTER_ALARM"
    reads = " ".join(exported(listed, at, "DEAD_LETTER_ALARM"))
    assert "describe-stacks" in reads and "OutputKey=='DeadLetterAlarmName'" in reads, reads
    queues = first(listed, lambda argv: "deploy/aws/queues.yaml" in argv, "deploys the queues")
    assert "AlarmTopicArn=$ALARM_TOPIC" in listed[queues], "the queues' alarms notify no one"


@pytest.mark.parametrize("key", EKS_KEYS)
def test_the_eks_steps_make_the_settings_and_secrets_before_the_workload(projects: dict[str, Path], key: str) -> None:
    """The worker's first pod starts with the owner's settings (the ConfigMap made from
    deploy/settings.env) and the service's secrets: both made after the namespace and
    before the manifests that hold the workload are applied."""
    project, answers = projects[key], ANSWERS[key]
    listed = ordered_commands(project)
    namespace = first(
        listed,
        lambda argv: argv[:4] == ["kubectl", "apply", "-f", "deploy/k8s/namespace.yaml"],
        "applies the namespace",
    )
    workload = first(listed, lambda argv: argv[:4] == ["kubectl", "apply", "-f", "deploy/k8s/"], "applies the workload")
    settings = first(
        listed,
        lambda argv: "configmap" in argv and "--from-env-file=deploy/settings.env" in argv,
        "makes the settings' ConfigMap from deploy/settings.env",
    )
    assert namespace < settings < workload, "the settings' ConfigMap is made between the namespace and the workload"
    if answers.secrets:
        secret = first(
            listed, lambda argv: argv[:5] == ["kubectl", "-n", answers.slug, "create", "secret"], "makes the Secret"
        )
        assert namespace < secret < workload, "the Secret is made between the namespace and the workload"
        made = {w.split("=", 1)[1].split("=", 1)[0] for w in listed[secret] if w.startswith("--from-literal=")}
        assert made == set(answers.secrets), f"the Secret holds {sorted(made)}, the service reads {answers.secrets}"


# The VPC endpoint each AWS service the ECS task's roles call is reached by (`ecs`: the task
# protection the worker sets through Fargate's agent, no endpoint of the task's own).
ENDPOINTS = {
    "sqs": "`sqs`",
    "logs": "`logs`",
    "ecr": "`ecr.api`",
    "secretsmanager": "`secretsmanager`",
    "ssm": "`ssm`",
    "xray": "`xray`",
    "s3": "S3",
    "dynamodb": "DynamoDB",
}
NO_ENDPOINT = {"ecs"}


def iam_actions(node: object) -> set[str]:
    """Every IAM action named under `node` (a role's policies): both branches of a condition,
    as the step must serve the stack whatever parameters it is given."""
    if isinstance(node, list):
        return {action for item in node for action in iam_actions(item)}
    if not isinstance(node, dict):
        return set()
    found: set[str] = set()
    for key, value in node.items():
        if key == "Action":
            found |= {a for a in ([value] if isinstance(value, str) else value) if isinstance(a, str)}
        else:
            found |= iam_actions(value)
    return found


@pytest.mark.parametrize("key", ECS_KEYS)
def test_the_ecs_subnets_step_names_an_endpoint_for_every_service_the_tasks_call(
    projects: dict[str, Path], key: str
) -> None:
    """Private subnets without a NAT reach AWS through VPC endpoints: the step that picks them
    names one for every service the task's and the execution role's policies call. It named
    the same five for every service, and a task of one with secrets (read at its start),
    tracing or idempotency could not start, or its jobs timed out."""
    project = projects[key]
    template = load_cfn(project / "deploy" / "ecs" / "service.yaml")
    roles = [
        r["Properties"].get("Policies", []) for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Role"
    ]
    called = {action.split(":")[0] for action in iam_actions(roles) if ":" in action} - NO_ENDPOINT
    readme = (project / "deploy" / "README.md").read_text()
    step = " ".join(readme.split("5. Pick a VPC", 1)[1].split("```", 1)[0].split())
    assert set(called) <= set(ENDPOINTS), f"no endpoint known for {sorted(set(called) - set(ENDPOINTS))}"
    missing = sorted(service for service in called if ENDPOINTS[service] not in step)
    assert not missing, f"the subnets step names no endpoint for {missing}: {step}"


# What step 4 installs before step 7 applies deploy/k8s/: Kubernetes' own kinds and KEDA's.
# A kind of another operator (Prometheus', External Secrets') is applied from a folder of
# its own once that operator runs: its CRD missing, `kubectl apply` fails the step.
STEP_4_GROUPS = ("v1", "apps/", "batch/", "policy/", "networking.k8s.io/", "keda.sh/")


@pytest.mark.parametrize("key", EKS_KEYS)
def test_what_the_eks_steps_apply_from_deploy_k8s_a_cluster_of_step_4_accepts(
    projects: dict[str, Path], key: str
) -> None:
    """`kubectl apply -f deploy/k8s/` (step 7) on the cluster the steps make: every object's
    kind is Kubernetes' own or KEDA's. The ServiceMonitor and PrometheusRule were there, and
    on a cluster without the Prometheus Operator the apply failed ("no matches for kind")."""
    project = projects[key]
    objects = load_k8s(project)
    foreign = {
        kind: obj["apiVersion"] for kind, obj in objects.items() if not obj["apiVersion"].startswith(STEP_4_GROUPS)
    }
    assert not foreign, f"deploy/k8s/ holds kinds no step before step 7 installs: {foreign}"
    listed = ordered_commands(project)
    monitoring = first(
        listed, lambda argv: argv[:4] == ["kubectl", "apply", "-f", "deploy/k8s/monitoring/"], "applies the monitoring"
    )
    workload = first(listed, lambda argv: argv[:4] == ["kubectl", "apply", "-f", "deploy/k8s/"], "applies the workload")
    assert workload < monitoring
    assert {obj["kind"] for obj in load_k8s(project, "monitoring").values()} == {"ServiceMonitor", "PrometheusRule"}


@pytest.mark.parametrize("key", [key for key in EKS_KEYS if ANSWERS[key].secrets])
def test_the_external_secrets_steps_make_the_role_its_service_account_names(
    projects: dict[str, Path], key: str
) -> None:
    """Followed in order, the External Secrets route works on the cluster the steps make: the
    role its service account names is made (it added a policy to a role no step made), on
    the cluster's OIDC provider (its token is IRSA's: a Pod Identity cluster has none until a
    step adds it), and the manifest's account placeholder is replaced before it is applied."""
    project = projects[key]
    listed = ordered_commands(project)
    path = "deploy/k8s/optional/external-secrets.yaml"
    applied = first(listed, lambda argv: argv[:4] == ["kubectl", "apply", "-f", path], "applies External Secrets")
    account = load_k8s(project, "optional")["ServiceAccount"]
    role = account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].rsplit("/", 1)[1]
    made = first(
        listed,
        lambda argv: role in argv and ("create-role" in argv or argv[:3] == ["eksctl", "create", "iamserviceaccount"]),
        f"makes the role {role}",
    )
    replaced = first(
        listed,
        lambda argv: argv[:2] == ["sed", "-i"] and path in argv and any(PLACEHOLDER_ACCOUNT in w for w in argv),
        f"replaces the account placeholder of {path}",
    )
    oidc = first(
        listed,
        lambda argv: "--with-oidc" in argv or argv[:3] == ["eksctl", "utils", "associate-iam-oidc-provider"],
        "gives the cluster an OIDC provider",
    )
    assert oidc < made < applied and replaced < applied
    if SUPPORTED[key].answers.get("eks_identity") == "pod-identity":
        assert "--with-oidc" not in listed[first(listed, lambda a: a[:3] == ["eksctl", "create", "cluster"], "")]


@pytest.mark.parametrize("key", EKS_KEYS)
def test_the_cluster_the_eks_steps_make_enforces_the_network_policy(projects: dict[str, Path], key: str) -> None:
    """deploy/k8s/networkpolicy.yaml (egress DNS and HTTPS only, never the instance metadata)
    binds only where the network plugin enforces it: the VPC CNI of the cluster the steps make
    (an EKS add-on, as eksctl installs it) has its network policy off until a step turns it on.
    Before, the policy was applied and silently not enforced."""
    project = projects[key]
    listed = ordered_commands(project)
    assert "NetworkPolicy" in load_k8s(project)
    made = first(listed, lambda argv: argv[:3] == ["eksctl", "create", "cluster"], "makes a cluster")
    configured = first(
        listed,
        lambda argv: argv[:3] == ["aws", "eks", "update-addon"] and "vpc-cni" in argv,
        "configures the cluster's VPC CNI",
    )
    workload = first(listed, lambda argv: argv[:4] == ["kubectl", "apply", "-f", "deploy/k8s/"], "applies the workload")
    argv = listed[configured]
    values = json.loads(argv[argv.index("--configuration-values") + 1])
    assert values.get("enableNetworkPolicy") == "true", values
    assert made < configured < workload


# Graviton instance families: a generation digit, then `g` (m6g, c7gn, t4g, r8gd...).
GRAVITON = re.compile(r"[a-z]+\d+g[a-z]*\.")
# What `eksctl create cluster` runs its nodes on when no --node-type is given (m5.large).
EKSCTL_DEFAULT_ARCH = "amd64"


@pytest.mark.parametrize("key", EKS_KEYS)
def test_the_cluster_the_eks_steps_make_has_nodes_of_the_architecture_the_pods_select(
    projects: dict[str, Path], key: str
) -> None:
    """The pods select their nodes' architecture (`kubernetes.io/arch`, the cpu_architecture
    answer): a cluster made by the steps, in order, must have nodes of it, or every pod of the
    first deploy stays Pending. An arm64 bake's step made an x86 cluster (eksctl's default)."""
    project = projects[key]
    listed = ordered_commands(project)
    create = listed[first(listed, lambda argv: argv[:3] == ["eksctl", "create", "cluster"], "makes a cluster")]
    node_type = create[create.index("--node-type") + 1] if "--node-type" in create else None
    nodes = EKSCTL_DEFAULT_ARCH if node_type is None else "arm64" if GRAVITON.match(node_type) else "amd64"
    objects = load_k8s(project)
    workload = objects.get("Deployment") or objects["ScaledJob"]
    spec = workload["spec"]
    pod = spec["jobTargetRef"]["template"] if workload["kind"] == "ScaledJob" else spec["template"]
    selected = pod["spec"]["nodeSelector"]["kubernetes.io/arch"]
    assert nodes == selected, (
        f"the steps make {nodes} nodes ({node_type or 'eksctl default'}), the pods select {selected}"
    )


@pytest.mark.parametrize("key", EKS_KEYS)
def test_the_eks_steps_give_kedas_operator_a_role_that_may_assume_the_scaler_role(
    projects: dict[str, Path], key: str
) -> None:
    """KEDA reads the backlog through the scaler role its TriggerAuthentication names, which
    it assumes with its operator's own credentials: the steps, run in order, must give the
    operator a role (IRSA on a cluster with an OIDC provider, or an EKS Pod Identity
    association made before KEDA starts) and let that role assume the scaler role. The
    grant was prose alone, and with Pod Identity the operator's role came from IRSA."""
    project = projects[key]
    steps = [words(c) for c in commands((project / "deploy" / "README.md").read_text(), blocks_only=True)]
    helm = first(steps, lambda argv: argv[:3] == ["helm", "install", "keda"], "installs KEDA")
    scaler = first(
        steps,
        lambda argv: argv[:3] == ["aws", "iam", "create-role"] and argv[4].endswith("-keda-scaler"),
        "creates the scaler role",
    )
    grants = [
        i
        for i, argv in enumerate(steps)
        if argv[:3] == ["aws", "iam", "put-role-policy"] and argv[3:5] == ["--role-name", "CHANGE-ME-keda-operator"]
    ]
    assert grants and grants[0] > scaler, "no step lets KEDA's operator role assume the scaler role"
    if SUPPORTED[key].answers.get("eks_identity") == "pod-identity":
        association = first(
            steps,
            lambda argv: (
                argv[:3] == ["aws", "eks", "create-pod-identity-association"]
                and argv[argv.index("--service-account") + 1] == "keda-operator"
            ),
            "associates KEDA's operator with its role",
        )
        assert association < helm, "KEDA starts before its operator has a role"
        assert not any("irsa" in word for word in steps[helm]), f"KEDA told to use IRSA: {steps[helm]}"
    else:
        cluster = first(steps, lambda argv: argv[:3] == ["eksctl", "create", "cluster"], "creates the cluster")
        assert "--with-oidc" in steps[cluster], "IRSA needs the cluster's OIDC provider"
        assert any(word.startswith("podIdentity.aws.irsa.roleArn=") for word in steps[helm]), steps[helm]
        # The role KEDA is told to use is made by a step before KEDA starts, trusting the
        # cluster's OIDC provider for KEDA's service account (it was prose in a later step).
        operator = first(
            steps,
            lambda argv: argv[:3] == ["aws", "iam", "create-role"] and argv[4] == "CHANGE-ME-keda-operator",
            "creates KEDA's operator role",
        )
        assert cluster < operator < helm, "KEDA starts before its operator's role exists"
        (document,) = [w.removeprefix("file://") for w in steps[operator] if w.startswith("file://")]
        readme = (project / "deploy" / "README.md").read_text()
        trust = readme.split(f"cat > {document} <<JSON\n", 1)[1].split("\n", 3)
        assert "AssumeRoleWithWebIdentity" in trust[0] and "system:serviceaccount:keda:keda-operator" in trust[2], trust


@pytest.mark.parametrize("key", list(SHAPES))
def test_each_stack_deploy_passes_the_parameters_whose_default_is_a_placeholder(
    projects: dict[str, Path], key: str
) -> None:
    """A parameter defaulting to a CHANGE-ME placeholder (a cluster's name) must be passed where
    the stack is first deployed, where the owner replaces it with the rest: left to its
    default, the release roles' deploy permission named a cluster called CHANGE-ME-cluster.
    (A later deploy of the same stack keeps the values it does not pass.)"""
    project = projects[key]
    steps = [words(c) for c in commands((project / "deploy" / "README.md").read_text(), blocks_only=True)]
    firsts: dict[str, list[str]] = {}
    for argv in steps:
        if argv[:3] == ["aws", "cloudformation", "deploy"]:
            firsts.setdefault(argv[argv.index("--stack-name") + 1], argv)
    assert firsts, "no stack is deployed"
    for argv in firsts.values():
        template = load_cfn(project / argv[argv.index("--template-file") + 1])
        placeholders = {
            name
            for name, parameter in template.get("Parameters", {}).items()
            if str(parameter.get("Default", "")).startswith("CHANGE-ME")
        }
        given = {word.split("=", 1)[0] for word in argv[argv.index("--parameter-overrides") + 1 :] if "=" in word}
        assert placeholders <= given, f"{argv[argv.index('--template-file') + 1]}: {sorted(placeholders - given)}"
