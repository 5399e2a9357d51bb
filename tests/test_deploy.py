"""The CloudFormation stacks deployed to LocalStack's CloudFormation, as an operator would:
deploy/aws/queues.yaml, then the parts of deploy/ecs/service.yaml that LocalStack's free
edition can create (IAM roles, the log groups, security groups, the CloudWatch alarms). What
it cannot create (the ECS service and task definition, Application Auto Scaling) is held to
botocore's models of those APIs in test_artifacts_ecs.py instead; the dashboard, which its
CloudFormation does not create, goes through CloudWatch's own PutDashboard.

Each stack goes to an account of its own (LocalStack takes a 12-digit access key id as the
account), so the baked queue names cannot meet another test's queues.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from artifacts import ANSWERS, Answers, context
from conftest import bake
from matrix import LIMITS, SUPPORTED
from validators import PLACEHOLDER_ACCOUNT, load_cfn

from sqs_worker_template_jinja.dashboard import panels

# LocalStack's DynamoDB needs a download at first use, so sets with the idempotency table
# deploy the queues stack without it (cfn-lint checks the table).
DEPLOYED = ["defaults", "eks-py313-fifo"]  # both targets; a standard and a FIFO queue
# Left out of the service stack: what LocalStack's free edition does not create.
NOT_IN_LOCALSTACK = ("AWS::ECS::", "AWS::ApplicationAutoScaling::", "AWS::EKS::", "AWS::CloudWatch::Dashboard")


def client(service: str, endpoint: str, region: str, account: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=account,
        aws_secret_access_key="test",
    )


def deploy(cfn: Any, name: str, template: dict[str, Any], parameters: dict[str, str] | None = None) -> dict[str, str]:
    """Create the stack and wait for it; returns its resources' physical ids by logical id."""
    cfn.create_stack(
        StackName=name,
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in (parameters or {}).items()],
        Capabilities=["CAPABILITY_IAM"],
    )
    deadline = time.monotonic() + 300
    while True:
        (stack,) = cfn.describe_stacks(StackName=name)["Stacks"]
        if not stack["StackStatus"].endswith("_IN_PROGRESS"):
            break
        assert time.monotonic() < deadline, f"{name} still {stack['StackStatus']}"
        time.sleep(1)
    events = [
        f"{e['LogicalResourceId']}: {e.get('ResourceStatusReason')}"
        for e in cfn.describe_stack_events(StackName=name)["StackEvents"]
        if e["ResourceStatus"].endswith("_FAILED")
    ]
    assert stack["StackStatus"] == "CREATE_COMPLETE", events
    resources = cfn.describe_stack_resources(StackName=name)["StackResources"]
    return {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in resources}


def localstack_part(template: dict[str, Any]) -> dict[str, Any]:
    """The template without what LocalStack cannot create, and without outputs naming it."""
    kept = {k: r for k, r in template["Resources"].items() if not r["Type"].startswith(NOT_IN_LOCALSTACK)}
    # And what acts on those (the step scaling policy's alarm).
    kept = {
        k: r for k, r in kept.items() if not set(template["Resources"]) - set(kept) & _named(r.get("Properties", {}))
    }
    removed = set(template["Resources"]) - set(kept)
    outputs = {
        k: o for k, o in template.get("Outputs", {}).items() if not removed & set(re.findall(r"\w+", json.dumps(o)))
    }
    return {**template, "Resources": kept, "Outputs": outputs}


def _named(value: Any) -> set[str]:
    """What a resource's properties name: by !Ref, !GetAtt and ${...} in !Sub."""
    if isinstance(value, list):
        return set().union(*(_named(v) for v in value))
    if not isinstance(value, dict):
        return set()
    named = set().union(*(_named(v) for v in value.values()))
    if isinstance(value.get("Ref"), str):
        named.add(value["Ref"])
    if isinstance(value.get("Fn::GetAtt"), list):
        named.add(value["Fn::GetAtt"][0])
    sub = value.get("Fn::Sub")
    if isinstance(sub, str) or (isinstance(sub, list) and isinstance(sub[0], str)):
        named |= {m.split(".")[0] for m in re.findall(r"\$\{([\w.:]+)\}", sub if isinstance(sub, str) else sub[0])}
    return named


@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("deploy")
    return {key: bake(out / key, **SUPPORTED[key].answers) for key in DEPLOYED}


@pytest.mark.parametrize("key", DEPLOYED)
def test_stacks_deploy_and_create_what_they_promise(baked: dict[str, Path], key: str, localstack_endpoint: str) -> None:
    project, answers = baked[key], ANSWERS[key]
    account = f"{100000000000 + DEPLOYED.index(key) + int(time.time()) % 10**9:012d}"
    aws = {
        s: client(s, localstack_endpoint, answers.region, account)
        for s in ("cloudformation", "sqs", "iam", "logs", "ec2", "s3", "cloudwatch")
    }

    queues = load_cfn(project / "deploy" / "aws" / "queues.yaml")
    queues["Resources"] = {k: r for k, r in queues["Resources"].items() if r["Type"] != "AWS::DynamoDB::Table"}
    queues["Outputs"] = {k: o for k, o in queues["Outputs"].items() if k != "IdempotencyTableName"}
    created = deploy(aws["cloudformation"], f"{answers.slug}-queues", queues)
    assert_queues(aws["sqs"], created, answers)
    assert_alarms(aws["cloudwatch"], created, queues)
    if answers.large:
        assert_payload_bucket(aws["s3"], created["PayloadBucket"], queues)

    assert_release_roles(aws, project, answers, account)

    if not answers.ecs:
        return
    vpc = aws["ec2"].describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    subnet = aws["ec2"].describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"][0]["SubnetId"]
    prometheus = aws["ec2"].create_security_group(GroupName="prometheus", Description="scraper", VpcId=vpc)["GroupId"]
    full = load_cfn(project / "deploy" / "ecs" / "service.yaml")
    service = localstack_part(full)
    # The queues stack names its dead-letter alarm for the service's deployment alarms.
    (stack,) = aws["cloudformation"].describe_stacks(StackName=f"{answers.slug}-queues")["Stacks"]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
    assert outputs["DeadLetterAlarmName"] == created["DeadLetterQueueInflowAlarm"]
    settings = f"arn:aws:s3:::settings-{account}/{answers.slug}/settings.env"
    parameters = {
        "VpcId": vpc,
        "SubnetIds": subnet,
        "MetricsSourceSecurityGroupId": prometheus,
        "ImageDigest": "sha256:" + "0" * 64,
        "DeadLetterAlarmName": outputs["DeadLetterAlarmName"],
        "SettingsFileArn": settings,
    }
    created = deploy(aws["cloudformation"], f"{answers.slug}-service", service, parameters)
    assert_service_parts(aws, created, project, answers, account, vpc)
    # The execution role reads the owner's settings file and locates its bucket, nothing more.
    (name,) = aws["iam"].list_role_policies(RoleName=created["ExecutionRole"])["PolicyNames"]
    document = aws["iam"].get_role_policy(RoleName=created["ExecutionRole"], PolicyName=name)["PolicyDocument"]
    reads = {s["Sid"]: (s["Action"], s["Resource"]) for s in document["Statement"] if "Settings" in s["Sid"]}
    assert reads == {
        "ReadSettingsFile": ("s3:GetObject", settings),
        "LocateSettingsBucket": ("s3:GetBucketLocation", f"arn:aws:s3:::settings-{account}"),
    }
    assert_alarms(aws["cloudwatch"], created, service)
    # The dashboard as the stack would create it (its body, the stack's region in it).
    resource = full["Resources"]["Dashboard"]["Properties"]
    body = resource["DashboardBody"]["Fn::Sub"].replace("${AWS::Region}", answers.region)
    aws["cloudwatch"].put_dashboard(DashboardName=resource["DashboardName"], DashboardBody=body)
    dashboard = aws["cloudwatch"].get_dashboard(DashboardName=resource["DashboardName"])
    widgets = json.loads(dashboard["DashboardBody"])["widgets"]
    assert [w["properties"]["title"] for w in widgets] == [p.title for p in panels(context(SUPPORTED[key].answers))]
    assert {w["properties"]["region"] for w in widgets} == {answers.region}


def assert_alarms(cloudwatch: Any, created: dict[str, str], template: dict[str, Any]) -> None:
    """Every alarm of the stack exists under the name CloudFormation gave it, on the metric
    (or the metric math) the template says."""
    logical = [name for name, r in template["Resources"].items() if r["Type"] == "AWS::CloudWatch::Alarm"]
    assert logical, "the stack holds no alarm"
    names = [created[name] for name in logical]
    found = {a["AlarmName"]: a for a in cloudwatch.describe_alarms(AlarmNames=names)["MetricAlarms"]}
    assert sorted(found) == sorted(names)
    for name in logical:
        alarm, wanted = found[created[name]], template["Resources"][name]["Properties"]
        assert alarm["AlarmDescription"].endswith(wanted["AlarmDescription"].rsplit("Runbook: ", 1)[1])
        if "MetricName" in wanted:
            assert alarm["MetricName"] == wanted["MetricName"]
        else:
            expressions = [m.get("Expression") for m in alarm["Metrics"] if m.get("ReturnData")]
            assert expressions == [m["Expression"] for m in wanted["Metrics"] if m.get("ReturnData")]


def assert_release_roles(aws: dict[str, Any], project: Path, answers: Answers, account: str) -> None:
    """deploy/aws/release-roles.yaml creates its two roles, each trusting GitHub's OIDC
    provider for this repository's tags (push) or its production environment (deploy)."""
    template = localstack_part(load_cfn(project / "deploy" / "aws" / "release-roles.yaml"))
    provider = f"arn:aws:iam::{account}:oidc-provider/token.actions.githubusercontent.com"
    parameters = {"GitHubRepository": "owner/repo", "GitHubOidcProviderArn": provider}
    if answers.ecs:
        parameters |= {
            "TaskRoleArn": f"arn:aws:iam::{account}:role/task",
            "ExecutionRoleArn": f"arn:aws:iam::{account}:role/execution",
        }
    created = deploy(aws["cloudformation"], f"{answers.slug}-release-roles", template, parameters)
    subjects = {
        "ImagePushRole": "repo:owner/repo:ref:refs/tags/v*",
        "DeployRole": "repo:owner/repo:environment:production",
    }
    for logical, subject in subjects.items():
        role = aws["iam"].get_role(RoleName=created[logical])["Role"]
        (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
        assert trust["Principal"] == {"Federated": provider} and trust["Action"] == "sts:AssumeRoleWithWebIdentity"
        conditions = {key: value for test in trust["Condition"].values() for key, value in test.items()}
        assert conditions["token.actions.githubusercontent.com:sub"] == subject, logical
        assert len(aws["iam"].list_role_policies(RoleName=created[logical])["PolicyNames"]) == 1


def assert_queues(sqs: Any, created: dict[str, str], answers: Answers) -> None:
    queue = sqs.get_queue_attributes(QueueUrl=created["Queue"], AttributeNames=["All"])["Attributes"]
    dlq = sqs.get_queue_attributes(QueueUrl=created["DeadLetterQueue"], AttributeNames=["All"])["Attributes"]
    assert created["Queue"].endswith("/" + answers.queue) and created["DeadLetterQueue"].endswith("/" + answers.dlq)
    assert int(queue["VisibilityTimeout"]) == answers.visibility
    assert int(queue["ReceiveMessageWaitTimeSeconds"]) == 20
    assert json.loads(queue["RedrivePolicy"]) == {
        "deadLetterTargetArn": dlq["QueueArn"],
        "maxReceiveCount": answers.max_receive,
    }
    allow = json.loads(dlq["RedriveAllowPolicy"])
    assert allow == {"redrivePermission": "byQueue", "sourceQueueArns": [queue["QueueArn"]]}
    fifo = answers.queue.endswith(".fifo")
    assert (queue.get("FifoQueue") == "true", dlq.get("FifoQueue") == "true") == (fifo, fifo)
    assert int(dlq["MessageRetentionPeriod"]) == 1209600 >= int(queue["MessageRetentionPeriod"])


def assert_payload_bucket(s3: Any, bucket: str, template: dict[str, Any]) -> None:
    """Private, encrypted, versioned, TLS only; and every object kept while a message may
    still point at it. LocalStack does not apply lifecycle rules: those are read from the
    template."""
    (rule,) = template["Resources"]["PayloadBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    assert rule["Status"] == "Enabled" and rule["ExpirationInDays"] * 86400 > LIMITS.MAX_RETENTION_SECONDS
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    encryption = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    assert encryption[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    assert all(block.values()) and len(block) == 4
    (statement,) = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])["Statement"]
    assert statement["Effect"] == "Deny" and statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def assert_service_parts(
    aws: dict[str, Any], created: dict[str, str], project: Path, answers: Answers, account: str, vpc: str
) -> None:
    iam = aws["iam"]
    # The task role holds exactly the policy file's statements, for this account and region.
    expected = json.loads(
        (project / "deploy" / "aws" / "worker-policy.json").read_text().replace(PLACEHOLDER_ACCOUNT, account)
    )
    task_role = created["TaskRole"]
    assert sorted(iam.list_role_policies(RoleName=task_role)["PolicyNames"]) == ["collector-metrics", "worker"]
    assert iam.get_role_policy(RoleName=task_role, PolicyName="worker")["PolicyDocument"] == expected
    (write,) = iam.get_role_policy(RoleName=task_role, PolicyName="collector-metrics")["PolicyDocument"]["Statement"]
    assert write["Resource"].startswith(
        f"arn:aws:logs:{answers.region}:{account}:log-group:/ecs/{answers.slug}/metrics"
    )
    for role in (task_role, created["ExecutionRole"]):
        (trust,) = iam.get_role(RoleName=role)["Role"]["AssumeRolePolicyDocument"]["Statement"]
        assert trust["Principal"] == {"Service": "ecs-tasks.amazonaws.com"}
        assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": account}}
        assert iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"] == []
    (name,) = iam.list_role_policies(RoleName=created["ExecutionRole"])["PolicyNames"]
    pulls = iam.get_role_policy(RoleName=created["ExecutionRole"], PolicyName=name)["PolicyDocument"]["Statement"]
    resources = {s["Sid"]: s["Resource"] for s in pulls}
    assert resources["PullImage"] == f"arn:aws:ecr:{answers.region}:{account}:repository/{answers.slug}"
    assert resources["WriteLogs"].startswith(f"arn:aws:logs:{answers.region}:{account}:log-group:/ecs/{answers.slug}")

    groups = aws["logs"].describe_log_groups(logGroupNamePrefix=f"/ecs/{answers.slug}")["logGroups"]
    # (LocalStack 4.14 creates the groups but does not apply RetentionInDays on create: the
    # retention is held to the template in test_artifacts_ecs.py.) The worker's logs, and the
    # collector's EMF metrics.
    assert sorted(g["logGroupName"] for g in groups) == [f"/ecs/{answers.slug}", f"/ecs/{answers.slug}/metrics"]

    # LocalStack 4.14 creates security groups but applies none of their rules (neither the
    # inline egress nor AWS::EC2::SecurityGroupIngress): the rules are held to the template
    # in test_artifacts_ecs.py; here, the group exists in the VPC the stack was given.
    (sg,) = aws["ec2"].describe_security_groups(GroupIds=[created["SecurityGroup"]])["SecurityGroups"]
    assert sg["VpcId"] == vpc and sg["Description"] == f"{answers.slug} worker tasks"
