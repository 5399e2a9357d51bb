"""The queues' CloudFormation template and the IAM policy the worker is given."""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
from artifacts import (
    ANSWERS,
    CHECKED,
)
from conftest import run
from matrix import LIMITS
from validators import (
    cfn_problems,
    load_cfn,
)

from sqs_worker_template_jinja.alerts import OLDEST_AGE_SECONDS


@pytest.mark.parametrize("key", CHECKED)
def test_queues_template(projects: dict[str, Path], key: str) -> None:
    project, answers = projects[key], ANSWERS[key]
    path = project / "deploy" / "aws" / "queues.yaml"
    assert cfn_problems(path, answers.region) == []

    template = load_cfn(path)
    resources = template["Resources"]
    queues = {
        r["Properties"]["QueueName"]: (name, r["Properties"])
        for name, r in resources.items()
        if r["Type"] == "AWS::SQS::Queue"
    }
    dlq = answers.dlq
    assert set(queues) == {answers.queue, dlq}
    queue_id, queue = queues[answers.queue]
    dlq_id, dead = queues[dlq]
    fifo = answers.queue.endswith(".fifo")
    for props in (queue, dead):
        assert props.get("FifoQueue", False) is fifo
        assert props["SqsManagedSseEnabled"] is True
    # fifo_throughput=high: the queue's limits per message group (its DLQ keeps the standard mode).
    high = fifo and answers.fifo_throughput == "high"
    assert (queue.get("DeduplicationScope"), queue.get("FifoThroughputLimit")) == (
        ("messageGroup", "perMessageGroupId") if high else (None, None)
    )
    assert "FifoThroughputLimit" not in dead
    assert queue["VisibilityTimeout"] == answers.visibility
    assert queue["ReceiveMessageWaitTimeSeconds"] == LIMITS.MAX_WAIT_SECONDS
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
        "maxReceiveCount": answers.max_receive,
    }
    assert dead["MessageRetentionPeriod"] == LIMITS.MAX_RETENTION_SECONDS
    assert queue.get("MessageRetentionPeriod", 345600) <= dead["MessageRetentionPeriod"]
    allow = dead["RedriveAllowPolicy"]
    assert allow["redrivePermission"] == "byQueue"
    (source,) = allow["sourceQueueArns"]
    assert source["Fn::Sub"].endswith(f":{answers.queue}")

    # The alarms on SQS's own metrics: the queue's age and in-flight count, the DLQ's inflow
    # (a rise of its depth: SQS's own moves included).
    alarms = {
        (metric["MetricName"], json.dumps(metric["Dimensions"][0]["Value"])): r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::CloudWatch::Alarm"
        for metric in [r["Properties"]]
        + [m["MetricStat"]["Metric"] for m in r["Properties"].get("Metrics", []) if "MetricStat" in m]
        if "MetricName" in metric
    }
    age = alarms[("ApproximateAgeOfOldestMessage", json.dumps({"Fn::GetAtt": [queue_id, "QueueName"]}))]
    assert age["Namespace"] == "AWS/SQS" and age["ComparisonOperator"] == "GreaterThanThreshold"
    assert template["Parameters"]["OldestMessageAgeThresholdSeconds"]["Default"] == OLDEST_AGE_SECONDS
    inflow = alarms[("ApproximateNumberOfMessagesVisible", json.dumps({"Fn::GetAtt": [dlq_id, "QueueName"]}))]
    assert inflow["Threshold"] == 0 and inflow["ComparisonOperator"] == "GreaterThanThreshold"
    assert [m["Expression"] for m in inflow["Metrics"] if m.get("ReturnData")] == ["DIFF(depth)"]
    inflight = alarms[("ApproximateNumberOfMessagesNotVisible", json.dumps({"Fn::GetAtt": [queue_id, "QueueName"]}))]
    assert inflight["Threshold"] == LIMITS.inflight_alert_threshold(answers.queue)

    # With idempotency: the table the code and the policy name, keyed and expired as
    # Powertools writes it, kept and recoverable.
    tables = [r for r in resources.values() if r["Type"] == "AWS::DynamoDB::Table"]
    assert len(tables) == (1 if answers.table else 0)
    if answers.table:
        (table,) = tables
        props = table["Properties"]
        assert props["TableName"] == answers.table
        assert props["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
        assert props["AttributeDefinitions"] == [{"AttributeName": "id", "AttributeType": "S"}]
        assert props["TimeToLiveSpecification"] == {"AttributeName": "expiration", "Enabled": True}
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert props["BillingMode"] == "PAY_PER_REQUEST"
        assert table["DeletionPolicy"] == table["UpdateReplacePolicy"] == "Retain"

    outputs = {name: out["Value"] for name, out in template["Outputs"].items()}
    assert {"Ref": queue_id} in outputs.values() and {"Ref": dlq_id} in outputs.values()
    assert {"Fn::GetAtt": [queue_id, "Arn"]} in outputs.values()
    assert {"Fn::GetAtt": [dlq_id, "Arn"]} in outputs.values()


@pytest.mark.parametrize("key", CHECKED)
def test_worker_policy(projects: dict[str, Path], key: str) -> None:
    project, answers = projects[key], ANSWERS[key]
    policy = json.loads((project / "deploy" / "aws" / "worker-policy.json").read_text())
    assert answers.policy_problems(policy) == []


# The Queue's properties `bootstrap` sets too, as SQS reports them (GetQueueAttributes' names).
SHARED_ATTRIBUTES = (
    "FifoQueue",
    "SqsManagedSseEnabled",
    "VisibilityTimeout",
    "ReceiveMessageWaitTimeSeconds",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
)


@pytest.mark.parametrize("key", [k for k in CHECKED if ANSWERS[k].queue.endswith(".fifo")])
def test_the_stack_names_where_its_queue_differs_from_what_bootstrap_makes(
    projects: dict[str, Path], key: str, localstack_endpoint: str
) -> None:
    """queues.yaml says its queue has the attributes `bootstrap` gives the queue an owner
    develops against; where it does not (high-throughput FIFO), it says which differ."""
    project, answers = projects[key], ANSWERS[key]
    (package,) = [p.name for p in (project / "src").iterdir() if p.is_dir()]
    account = {"AWS_ACCESS_KEY_ID": str(secrets.randbelow(9 * 10**11) + 10**11), "AWS_SECRET_ACCESS_KEY": "test"}
    env = {**account, "AWS_ENDPOINT_URL": localstack_endpoint, "AWS_REGION": answers.region}
    made = run(
        [sys.executable, "-m", package, "bootstrap"], project, timeout=120, PYTHONPATH=str(project / "src"), **env
    )
    assert made.returncode == 0, made.stdout + made.stderr
    sqs: Any = boto3.client(
        "sqs",
        endpoint_url=localstack_endpoint,
        region_name=answers.region,
        aws_secret_access_key="test",
        aws_access_key_id=account["AWS_ACCESS_KEY_ID"],
    )
    url = sqs.get_queue_url(QueueName=answers.queue)["QueueUrl"]
    made_attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    path = project / "deploy" / "aws" / "queues.yaml"
    template = load_cfn(path)
    (stack_queue,) = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::SQS::Queue" and r["Properties"]["QueueName"] == answers.queue
    ]
    defaults = {"ContentBasedDeduplication": "false", "DeduplicationScope": "queue", "FifoThroughputLimit": "perQueue"}
    differ = sorted(
        name
        for name in SHARED_ATTRIBUTES
        if str(stack_queue.get(name, defaults.get(name))).lower()
        != str(made_attrs.get(name, defaults.get(name))).lower()
    )
    description = " ".join(template["Description"].split())
    for name in differ:
        assert name in description, (
            f"{name}: the stack says {stack_queue.get(name)}, bootstrap makes {made_attrs.get(name)}; the description does not say so: {description}"
        )
