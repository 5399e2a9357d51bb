"""The docs site's how-to guides (docs/how-to/): which page says what each answer other than
the default adds, and which says how a handler reads each envelope. One table, read by the
generated README (`guides(cookiecutter)`: the pages of the answers a service was baked with)
and by scripts/docs_reference.py (docs/how-to/index.md links each answer and envelope to its
page). Imports nothing of the package.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

HOW_TO = "docs/how-to"
# Answers that only mean something where Kubernetes is a target (ignored with ECS alone).
KUBERNETES_ONLY = ("kubernetes_workload", "eks_identity")


class Guide(NamedTuple):
    """A how-to page: `page` under docs/how-to/ (with `#anchor` for a section of it)."""

    variable: str  # the cookiecutter variable, or the envelope's name
    answer: str  # the answer the page is about; for queue_name, the suffix that makes it FIFO
    page: str
    title: str

    @property
    def doc(self) -> str:
        """The page's path in the template repository (its anchor aside)."""
        return f"{HOW_TO}/{self.page.split('#', 1)[0]}"

    @property
    def anchor(self) -> str:
        return self.page.partition("#")[2]

    def applies(self, answers: Mapping[str, Any]) -> bool:
        """Whether a service baked with `answers` has this answer (and it means something there)."""
        value = str(answers.get(self.variable) or "")
        if self.variable in KUBERNETES_ONLY and answers.get("deploy_target") == "ecs":
            return False
        if self.variable == "queue_name":
            return value.endswith(self.answer)
        return value == self.answer


# cookiecutter.json's order; tests/test_docs_site.py and tests/test_readmes.py check each page
# is there, and that a bake's README links exactly the pages of its answers.
ANSWERS: tuple[Guide, ...] = (
    Guide("queue_name", ".fifo", "fifo.md", "FIFO queues and message groups"),
    Guide("deploy_target", "ecs", "deploy-target.md", "Deploying to ECS alone"),
    Guide("deploy_target", "eks", "deploy-target.md", "Deploying to EKS alone"),
    Guide("kubernetes_workload", "scaledjob", "scaledjob.md", "A ScaledJob for long jobs"),
    Guide("fifo_throughput", "high", "fifo.md#high-throughput", "FIFO high throughput"),
    Guide("capacity", "spot-mix", "spot.md", "Spot capacity"),
    Guide("cpu_architecture", "arm64", "arm64.md", "Graviton (arm64)"),
    Guide("eks_identity", "pod-identity", "pod-identity.md", "EKS Pod Identity"),
    Guide("use_idempotency", "yes", "idempotency.md", "Idempotency on DynamoDB"),
    Guide("untrusted_input", "yes", "untrusted-input.md", "Untrusted input: a locked-down pool"),
    Guide("large_payloads", "yes", "large-payloads.md", "Large payloads through S3"),
    Guide("tracing", "yes", "tracing.md", "Tracing to AWS X-Ray"),
    Guide("engine_source", "index", "engine-index.md", "The engine from a package index"),
)

# Each envelope a handler may declare (`envelope=`, the engine's EnvelopeKind) but "raw", the
# default, which wraps nothing.
ENVELOPES: tuple[Guide, ...] = (
    Guide("envelope", "sns", "sns.md", "SNS: a topic the queue subscribes to"),
    Guide("envelope", "sns-raw", "sns-raw.md", "SNS with raw message delivery"),
    Guide("envelope", "eventbridge", "eventbridge.md", "EventBridge: a rule that targets the queue"),
    Guide("envelope", "s3", "s3.md", "S3 event notifications"),
    Guide("envelope", "sns+s3", "sns-s3.md#s3-notifications-through-sns", "S3 notifications through SNS"),
    Guide("envelope", "sns+eventbridge", "sns-s3.md#eventbridge-events-through-sns", "EventBridge events through SNS"),
)


def guides(cookiecutter: Mapping[str, Any]) -> list[Guide]:
    """The how-to pages of the answers a service was baked with other than the defaults."""
    return [guide for guide in ANSWERS if guide.applies(cookiecutter)]
