"""The queues' CloudFormation template and the IAM policy the worker is given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from artifacts import (
    ANSWERS,
    CHECKED,
)
from matrix import LIMITS
from validators import (
    cfn_problems,
    load_cfn,
)

import observability


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
    assert template["Parameters"]["OldestMessageAgeThresholdSeconds"]["Default"] == observability.OLDEST_AGE_SECONDS
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
