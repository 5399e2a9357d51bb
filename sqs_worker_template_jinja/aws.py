"""What a bake says of AWS: the partition and DNS suffix of its region, the worker's IAM
policy, and the owner's secrets.

- `partition` / `dns_suffix` (filters on a region): the AWS partition an ARN names and the
  domain its endpoints live under, so that a China, GovCloud or ISO region gets ARNs and
  hosts that exist there.
- `worker_policy(cookiecutter, cfn)`: the worker's IAM statements, once, for the policy file
  (literal ARNs) and for the ECS stack's task role (ARNs the stack builds itself).
- `secret_parameter` (filter): the ECS stack's parameter for an owner secret's ARN
  (DATABASE_URL -> DatabaseUrlSecretArn); `secrets(cookiecutter)`: the `secrets` answer as
  a list; `secret_path(cookiecutter, name)`: where that secret lives in Secrets Manager.
"""

from __future__ import annotations

from typing import Any

from .checkout import load_limits

# (region prefix, partition, DNS suffix), most specific first. The same data as botocore's
# partitions.json (tests/test_rendering.py holds this table to it), kept here because
# cookiecutter runs without botocore.
PARTITIONS = [
    ("cn-", "aws-cn", "amazonaws.com.cn"),
    ("us-gov-", "aws-us-gov", "amazonaws.com"),
    ("us-isob-", "aws-iso-b", "sc2s.sgov.gov"),
    ("us-isof-", "aws-iso-f", "csp.hci.ic.gov"),
    ("us-iso-", "aws-iso", "c2s.ic.gov"),
    ("eu-isoe-", "aws-iso-e", "cloud.adc-e.uk"),
    ("eusc-", "aws-eusc", "amazonaws.eu"),
]
DEFAULT_PARTITION = ("aws", "amazonaws.com")


def _partition(region: str) -> tuple[str, str]:
    for prefix, name, suffix in PARTITIONS:
        if region.startswith(prefix):
            return name, suffix
    return DEFAULT_PARTITION


def partition(region: str) -> str:
    return _partition(region)[0]


def dns_suffix(region: str) -> str:
    return _partition(region)[1]


PLACEHOLDER_ACCOUNT = "123456789012"
# The large-payload bucket is named by CloudFormation (deploy/aws/queues.yaml's output
# PayloadBucketName); the policy file and the Kubernetes manifests say where it goes. In
# lower case, unlike the other placeholders: it must stay a valid bucket name, which the
# worker's settings insist on.
PAYLOAD_BUCKET_PLACEHOLDER = "change-me-payload-bucket"
# What the ADOT collector's X-Ray exporter calls (AWS's AWSXrayWriteOnlyAccess policy), and
# xray:PutSpans: the worker's own spans straight to X-Ray's OTLP endpoint, the other route.
XRAY_ACTIONS = [
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
    "xray:PutSpans",
    "xray:PutTelemetryRecords",
    "xray:PutTraceSegments",
]


def worker_policy(cookiecutter: dict[str, Any], cfn: bool = False) -> dict[str, Any]:
    """The worker's IAM policy: consume its queue, dead-letter to its DLQ, scale-in protection
    for its own ECS tasks (on ECS), its idempotency table (with idempotency).

    `cfn=False`: literal ARNs in the bake's region and partition, account 123456789012 (the
    policy file, for an EKS role or a review). `cfn=True`: ARNs the ECS stack substitutes
    (`Fn::Sub` with the stack's own partition, region, account and cluster)."""
    region = cookiecutter["aws_region"]
    slug = cookiecutter["project_slug"]

    def arn(service: str, resource: str) -> Any:
        if cfn:
            return {"Fn::Sub": f"arn:${{AWS::Partition}}:{service}:${{AWS::Region}}:${{AWS::AccountId}}:{resource}"}
        return f"arn:{partition(region)}:{service}:{region}:{PLACEHOLDER_ACCOUNT}:{resource}"

    queue = cookiecutter["queue_name"]
    statements: list[dict[str, Any]] = [
        {
            "Sid": "ConsumeQueue",
            "Effect": "Allow",
            "Action": [
                "sqs:ChangeMessageVisibility",
                "sqs:DeleteMessage",
                "sqs:GetQueueAttributes",
                "sqs:GetQueueUrl",
                "sqs:ReceiveMessage",
            ],
            "Resource": arn("sqs", queue),
        },
        {
            "Sid": "DeadLetterNonRetryable",
            "Effect": "Allow",
            "Action": ["sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage"],
            "Resource": arn("sqs", load_limits().dlq_name(queue)),
        },
    ]
    if cookiecutter["deploy_target"] != "eks":
        cluster = "${ClusterName}" if cfn else "CHANGE-ME-cluster"
        statements.append(
            {
                # Task ids are not known in advance, so the resource is every task of the
                # cluster; the condition narrows it to this service's tasks (the service
                # propagates its `service` tag to every task it starts).
                "Sid": "ScaleInProtectionWhileBusy",
                "Effect": "Allow",
                "Action": ["ecs:GetTaskProtection", "ecs:UpdateTaskProtection"],
                "Resource": arn("ecs", f"task/{cluster}/*"),
                "Condition": {"StringEquals": {"aws:ResourceTag/service": slug}},
            }
        )
    if cookiecutter["use_idempotency"] == "yes":
        statements.append(
            {
                "Sid": "IdempotencyRecords",
                "Effect": "Allow",
                "Action": ["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"],
                "Resource": arn("dynamodb", f"table/{slug}-idempotency"),
            }
        )
    if cookiecutter["large_payloads"] == "yes":
        bucket = "${PayloadBucketName}" if cfn else PAYLOAD_BUCKET_PLACEHOLDER
        objects = f"arn:{partition(region)}:s3:::{bucket}/*"
        statements.append(
            {
                # Read offloaded payloads, offload what `send` and the producer send, delete
                # after processing (WORKER_LARGE_PAYLOAD_DELETE). Objects only: no listing.
                "Sid": "LargePayloads",
                "Effect": "Allow",
                "Action": ["s3:DeleteObject", "s3:GetObject", "s3:PutObject"],
                "Resource": {"Fn::Sub": f"arn:${{AWS::Partition}}:s3:::{bucket}/*"} if cfn else objects,
            }
        )
    if cookiecutter["tracing"] == "yes":
        statements.append(
            {
                # The collector beside the worker sends its traces to X-Ray. These actions
                # take no resource: X-Ray authorises them for the account as a whole.
                "Sid": "WriteTraces",
                "Effect": "Allow",
                "Action": XRAY_ACTIONS,
                "Resource": "*",
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


def secrets(cookiecutter: dict[str, Any]) -> list[str]:
    """The owner's secrets (the `secrets` answer: names separated by commas or spaces)."""
    return [name for name in str(cookiecutter.get("secrets") or "").replace(",", " ").split() if name]


def secret_parameter(name: str) -> str:
    """The ECS stack's parameter holding a secret's ARN: DATABASE_URL -> DatabaseUrlSecretArn."""
    return "".join(part.capitalize() for part in name.split("_") if part) + "SecretArn"


def secret_path(cookiecutter: dict[str, Any], name: str) -> str:
    """Where a secret lives in Secrets Manager by the deploy docs' convention:
    `<slug>/<name in lower case, hyphens>` (DATABASE_URL -> orders-worker/database-url)."""
    return f"{cookiecutter['project_slug']}/{name.lower().replace('_', '-')}"
