"""What the commands of a generated service's docs name, held to what its bake renders.

`problems(project)` reads the shell blocks of README.md and deploy/README.md (and the inline
code spans that are commands: `make upgrade`, `kubectl ...`), and of the docs site's owner's
pages the README links (`site_links`, under docs/service/ and docs/how-to/: where its long
parts went, the how-to guides of its answers among them), with markdown-it, the parser pytest-markdown-docs uses, splits each command into words
with shlex, and names every word that points at something the bake does not have:

- a file or folder (`deploy/...`, `--template-file`, `kubectl apply -f`);
- a make target of the service's Makefile;
- a Kubernetes kind, `<kind>/<name>`, namespace, container or pod label; the ConfigMap or
  Secret a `kubectl create` makes, which a workload's pod must read;
- a CloudFormation stack's parameter (`--parameter-overrides`) or output (`OutputKey=='X'`,
  also inside `$(...)`, `<stack output X>`), the stack known by the `aws cloudformation
  deploy` that creates it.

A failure reads "<doc>: `<command>`: <what is missing>".
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from markdown_it import MarkdownIt
from validators import load_cfn

DOCS = ("README.md", "deploy/README.md")
# The template checkout the bakes are made from: the docs site's pages a README links are its.
TEMPLATE_ROOT = Path(__file__).resolve().parents[1]
# The docs site's sections written for a service's owner: their commands are the service's
# (the site's other pages, docs/scaling.md among them, speak of the template's own).
OWNER_PAGES = ("docs/service/", "docs/how-to/")
# A page of the template repository's docs site as the generated README names it
# (sqs_worker_template_jinja/source.py, `template_doc_link`): its path in backticks for a bake
# from a checkout, or the address of the file at the commit baked from; `#anchor` a heading.
SITE_LINK = re.compile(r"(?:`|/blob/[0-9a-f]{7,40}/)(docs/[\w./-]+?\.md)(?:#([\w-]+))?")
SHELLS = ("sh", "bash", "shell", "console")
# kubectl's names for the kinds the docs use, and which rendered kind makes objects of a
# kind the bake does not render itself (pods of a Deployment, Jobs of a ScaledJob).
KINDS = {
    "deploy": "Deployment",
    "deployment": "Deployment",
    "deployments": "Deployment",
    "scaledjob": "ScaledJob",
    "scaledjobs": "ScaledJob",
    "scaledobject": "ScaledObject",
    "scaledobjects": "ScaledObject",
    "so": "ScaledObject",
    "job": "Job",
    "jobs": "Job",
    "pod": "Pod",
    "pods": "Pod",
    "secret": "Secret",
    "secrets": "Secret",
    "configmap": "ConfigMap",
    "cm": "ConfigMap",
    "svc": "Service",
    "service": "Service",
    "servicemonitor": "ServiceMonitor",
    "prometheusrule": "PrometheusRule",
    "namespace": "Namespace",
    "ns": "Namespace",
}
MADE_BY = {"Pod": ("Deployment", "ScaledJob"), "Job": ("ScaledJob",)}
ROLLOUT_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
PROSE_OUTPUT = re.compile(r"<([\w.-]+) output (\w+)>")
# A path in a command: a folder (ends in /), a glob or a file with its extension.
COMMAND_PATH = re.compile(r"(?<![\w/$.])deploy/[\w./*-]*(?:/|\*[\w.]*|\.\w+)")
# A deploy file named in the text, relative to the project or to deploy/.
PROSE_PATH = re.compile(r"^(?:deploy/)?(?:k8s|ecs|aws|prometheus|grafana)/[\w./-]+\.(?:yaml|json)$")
SECTIONS = {"ECS": "## On ECS", "EKS": "## On EKS"}


@dataclass
class Rendered:
    """What one bake holds: its files, make targets, Kubernetes objects and stacks."""

    project: Path
    targets: set[str]
    objects: dict[tuple[str, str], dict[str, Any]]  # (kind, name) -> object
    stacks: dict[str, dict[str, Any]] = field(default_factory=dict)  # stack name -> template

    @classmethod
    def of(cls, project: Path) -> Rendered:
        makefile = (project / "Makefile").read_text()
        targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.MULTILINE))
        objects: dict[tuple[str, str], dict[str, Any]] = {}
        for path in sorted((project / "deploy").glob("k8s/**/*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc:
                    objects[(doc["kind"], doc["metadata"]["name"])] = doc
        return cls(project, targets, objects)

    def kinds(self) -> set[str]:
        return {kind for kind, _ in self.objects}

    def has_kind(self, kind: str) -> bool:
        return kind in self.kinds() or any(maker in self.kinds() for maker in MADE_BY.get(kind, ()))

    def read_by_pods(self) -> set[tuple[str, str]]:
        """The ConfigMaps and Secrets the workloads' containers read, (kind, name)."""
        found: set[tuple[str, str]] = set()
        for spec in self.pod_specs():
            for container in spec["spec"].get("containers", []) + spec["spec"].get("initContainers", []):
                for source in container.get("envFrom", []):
                    found |= {("ConfigMap", source["configMapRef"]["name"])} if "configMapRef" in source else set()
                    found |= {("Secret", source["secretRef"]["name"])} if "secretRef" in source else set()
                for env in container.get("env", []):
                    ref = env.get("valueFrom", {})
                    found |= {("ConfigMap", ref["configMapKeyRef"]["name"])} if "configMapKeyRef" in ref else set()
                    found |= {("Secret", ref["secretKeyRef"]["name"])} if "secretKeyRef" in ref else set()
        return found

    def pod_specs(self) -> Iterator[dict[str, Any]]:
        """The pod templates of the workloads: a Deployment's and a ScaledJob's Job's."""
        for (kind, _), obj in self.objects.items():
            if kind == "Deployment":
                yield obj["spec"]["template"]
            elif kind == "ScaledJob":
                yield obj["spec"]["jobTargetRef"]["template"]


def commands(markdown: str, blocks_only: bool = False) -> Iterator[str]:
    """The commands a doc gives: each line of its shell blocks (continuations joined,
    heredoc bodies and comments left out), and inline code that starts like a command
    (`blocks_only`: the blocks' alone, what a reader following the steps runs)."""
    for token in MarkdownIt().parse(markdown):
        if token.type == "fence" and token.info.split()[:1] and token.info.split()[0] in SHELLS:
            yield from _block_commands(token.content)
        elif token.type == "inline" and not blocks_only:
            for child in token.children or []:
                if child.type == "code_inline" and re.match(r"(?:[A-Z_]+=\S+ )*(make|kubectl|aws) ", child.content):
                    yield child.content


def _block_commands(block: str) -> Iterator[str]:
    heredoc: str | None = None
    pending = ""
    for line in block.splitlines():
        if heredoc is not None:
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        command, pending = re.sub(r"\s+#\s.*$", "", (pending + line).strip()), ""
        if command and not command.startswith("#"):
            marker = re.search(r"<<-?\s*'?(\w+)'?", command)
            heredoc = marker.group(1) if marker else None
            yield command


def words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:  # an unbalanced quote inside $(...): words as whitespace shows them
        return command.split()


def site_links(markdown: str) -> list[tuple[str, str]]:
    """The docs site's pages a generated README names, in order: (path in the template
    repository, anchor or "")."""
    return [(doc, anchor or "") for doc, anchor in SITE_LINK.findall(markdown)]


def problems(project: Path) -> list[str]:
    rendered = Rendered.of(project)
    found: list[str] = []
    readme = (project / "README.md").read_text()
    for doc in dict.fromkeys(doc for doc, _ in site_links(readme) if doc.startswith(OWNER_PAGES)):
        path = TEMPLATE_ROOT / doc
        if not path.is_file():
            found.append(f"README.md: names {doc}, which the template does not have")
            continue
        for command in commands(path.read_text()):
            found += [f"{doc}: `{command}`: {p}" for p in _command_problems(rendered, words(command))]
    for doc in DOCS:
        path = project / doc
        if not path.is_file():
            continue
        text = path.read_text()
        listed = list(commands(text))
        # Stacks first: a command may read the outputs of a stack a later step deploys.
        for command in listed:
            _note_stack(rendered, words(command))
        for command in listed:
            found += [f"{doc}: `{command}`: {p}" for p in _command_problems(rendered, words(command))]
        for stack, output in PROSE_OUTPUT.findall(text):
            found += [f"{doc}: <{stack} output {output}>: {p}" for p in _output_problems(rendered, stack, output)]
        for named in _prose_paths(text) if doc.startswith("deploy/") else ():
            if not (project / named).exists() and not (project / "deploy" / named).exists():
                found.append(f"{doc}: `{named}` is not in this bake")
        for target, heading in SECTIONS.items():
            if f"as in the {target} steps" in text and heading not in text:
                found.append(f"{doc}: refers to the {target} steps, which this bake has none of")
    return found


def _prose_paths(markdown: str) -> Iterator[str]:
    for token in MarkdownIt().enable("table").parse(markdown):
        for child in token.children or []:
            if child.type == "code_inline" and PROSE_PATH.match(child.content):
                yield child.content


def _note_stack(rendered: Rendered, argv: list[str]) -> None:
    if argv[:3] == ["aws", "cloudformation", "deploy"]:
        stack, template = _option(argv, "--stack-name"), _option(argv, "--template-file")
        if stack and template and (rendered.project / template).is_file():
            rendered.stacks[stack] = load_cfn(rendered.project / template)


def _option(argv: list[str], name: str) -> str | None:
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def _command_problems(rendered: Rendered, argv: list[str]) -> list[str]:
    out: list[str] = []
    for word in argv:
        for ref in COMMAND_PATH.findall(word):
            if not list(rendered.project.glob(ref.rstrip("/"))):
                out.append(f"{ref} is not in this bake")
    while argv and re.fullmatch(r"[A-Z_]+=\S*", argv[0]):
        argv = argv[1:]  # VAR=value before the command
    if argv[:1] == ["make"]:
        for target in (w for w in argv[1:] if not w.startswith("-") and "=" not in w):
            if target not in rendered.targets:
                out.append(f"no make target {target!r} in the Makefile")
    elif argv[:1] == ["kubectl"]:
        out += _kubectl_problems(rendered, argv[1:])
    elif argv[:2] == ["aws", "cloudformation"]:
        out += _stack_problems(rendered, argv)
    elif "describe-stacks" in argv:  # a stack's output read inside $(...)
        for output in re.findall(r"OutputKey==[\\]?'(\w+)'", " ".join(argv)):
            out += _output_problems(rendered, _option(argv, "--stack-name") or "", output)
    elif argv[:1] == ["docker"] and argv[1:2] == ["build"]:
        out.append("builds without `make build` (which refuses an unreachable engine and passes the build secret)")
    return out


def _kubectl_problems(rendered: Rendered, argv: list[str]) -> list[str]:
    out: list[str] = []
    namespace = _option(argv, "-n") or _option(argv, "--namespace")
    if namespace and ("Namespace", namespace) not in rendered.objects:
        out.append(f"no Namespace {namespace!r} rendered")
    args: list[str] = []
    words_in = iter(argv)
    for word in words_in:
        if word in ("-n", "--namespace", "-l", "-f", "-p", "-o", "--type", "-c"):
            next(words_in, None)  # the option's value
        elif not word.startswith("-"):
            args.append(word)
    verb = args[0] if args else ""
    if verb == "create" and len(args) >= 3:
        # A ConfigMap or Secret of the worker's, made from the command line: a workload reads it.
        kind = {"configmap": "ConfigMap", "cm": "ConfigMap", "secret": "Secret"}.get(args[1])
        name = args[3] if kind == "Secret" and args[2] in ("generic", "tls", "docker-registry") else args[2]
        if kind and (kind, name) not in rendered.read_by_pods():
            out.append(f"no workload reads the {kind} {name!r} it makes (they read {sorted(rendered.read_by_pods())})")
    if verb in ("create", "apply", "delete"):
        return out  # what it creates is the doc's own; applied files are checked as files
    for arg in args[1:]:
        for kind_word in arg.split(","):
            kind_name = kind_word.split("/", 1)
            kind = KINDS.get(kind_name[0].lower())
            if kind is None:
                continue
            if len(kind_name) == 2:
                if (kind, kind_name[1]) not in rendered.objects:
                    out.append(f"no {kind} {kind_name[1]!r} rendered (it renders {sorted(rendered.kinds())})")
            elif not rendered.has_kind(kind):
                out.append(f"no {kind} in this bake (it renders {sorted(rendered.kinds())})")
            if verb == "rollout" and kind not in ROLLOUT_KINDS:
                out.append(f"a {kind} has no rollout")
    if verb == "set" and args[1:2] == ["image"]:
        containers = {c["name"] for spec in rendered.pod_specs() for c in spec["spec"]["containers"]}
        for assignment in (a for a in args[3:] if "=" in a):
            if assignment.split("=", 1)[0] not in containers:
                out.append(f"no container {assignment.split('=', 1)[0]!r} (containers: {sorted(containers)})")
    selector = _option(argv, "-l")
    if selector:
        key, _, value = selector.partition("=")
        if not any(spec["metadata"].get("labels", {}).get(key) == value for spec in rendered.pod_specs()):
            out.append(f"no pod template labelled {selector}")
    return out


def _stack_problems(rendered: Rendered, argv: list[str]) -> list[str]:
    out: list[str] = []
    stack = _option(argv, "--stack-name")
    if argv[2:3] == ["deploy"]:
        template = rendered.stacks.get(stack or "")
        if template is None:
            return out  # its --template-file is checked as a file
        if "--parameter-overrides" in argv:
            given = argv[argv.index("--parameter-overrides") + 1 :]
            for name in (w.split("=", 1)[0] for w in given if "=" in w and not w.startswith("-")):
                if name not in template.get("Parameters", {}):
                    out.append(f"stack {stack} has no parameter {name}")
    for output in re.findall(r"OutputKey==[\\]?'(\w+)'", " ".join(argv)):
        out += _output_problems(rendered, stack or "", output)
    return out


def _output_problems(rendered: Rendered, stack: str, output: str) -> list[str]:
    template = rendered.stacks.get(stack)
    if template is None:
        return [f"no step deploys a stack {stack!r}"]
    if output not in template.get("Outputs", {}):
        return [f"stack {stack} has no output {output} (outputs: {sorted(template.get('Outputs', {}))})"]
    return []
