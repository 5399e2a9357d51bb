"""Alerts and dashboards: the Prometheus rules, every alert on each platform a bake targets, and
the CloudWatch and Grafana dashboards."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from artifacts import (
    ANSWERS,
    CHECKED,
    ECS_RESOURCES,
    ECS_SETS,
    context,
)
from matrix import LIMITS, SUPPORTED
from validators import (
    api_problems,
    cfn_names,
    cfn_resolve,
    check_rules,
    engine_metrics,
    load_cfn,
    load_k8s,
    promql_metric_names,
    unknown_metrics,
)

from sqs_worker_template_jinja.alerts import SEVERITIES, alerts


@pytest.mark.parametrize("key", CHECKED)
def test_prometheus_rules(projects: dict[str, Path], key: str) -> None:
    project, answers = projects[key], ANSWERS[key]
    path = project / "deploy" / "prometheus" / "alerts.yaml"
    assert check_rules(path) == []

    rules = [rule for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]
    exprs = {rule["alert"]: " ".join(rule["expr"].split()) for rule in rules}
    for name, expr in exprs.items():
        assert unknown_metrics(expr) == set(), f"{name}: {expr}"
        assert f'job="{answers.slug}"' in expr, f"{name} does not select this service"

    def one(pattern: str) -> str:
        found = [expr for expr in exprs.values() if re.search(pattern, expr)]
        assert found, f"no alert matches {pattern!r}"
        return found[0]

    one(r"queue_oldest_message_seconds\{[^}]*\}\)* > \d+")
    one(r"sqs_queue_messages\{[^}]*state=\"visible\"[^}]*\}.*/.*worker_concurrency")
    one(r"increase\(worker_dead_letter_sends_total\{[^}]*\}\[10m\]\)\) > 0")
    one(r"worker_leases_lost_total")
    stalled = one(r"time\(\) - worker_last_progress_timestamp_seconds")
    assert float(stalled.rsplit(">", 1)[1]) == answers.stalled_after
    ratio = one(r"jobs_processed_total\{[^}]*outcome=~\"retry\|dead_letter\|timeout\"")
    assert "/" in ratio


@pytest.mark.parametrize("key", CHECKED)
def test_every_alert_exists_on_each_platform_the_bake_targets(projects: dict[str, Path], key: str) -> None:
    """The one table of alerts: on EKS a rule each (in the PrometheusRule too), on ECS a
    CloudWatch alarm each (SQS's metrics in the queues stack, the worker's in the service
    stack), each with its runbook heading in deploy/README.md; and nothing a bake does not
    render named by its alerts (an ECS-only bake has no deploy/k8s)."""
    project, answers = projects[key], ANSWERS[key]
    table = alerts(context(SUPPORTED[key].answers))
    names = [alert.name for alert in table]
    assert len(set(names)) == len(names)
    rules = yaml.safe_load((project / "deploy" / "prometheus" / "alerts.yaml").read_text())
    by_name = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    # A rule each but for an alert on a metric only CloudWatch has (no expr).
    ruled = [alert.name for alert in table if alert.expr]
    assert list(by_name) == ruled
    readme = (project / "deploy" / "README.md").read_text()
    anchors = {h.strip().lower() for h in re.findall(r"^### (\S+)$", readme, re.MULTILINE)}
    for alert in table:
        if alert.expr:
            assert by_name[alert.name]["annotations"]["runbook_url"] == f"deploy/README.md#{alert.anchor}"
        assert alert.anchor in anchors, f"no runbook heading for {alert.name}"
        assert alert.severity in SEVERITIES
    if answers.eks:
        operator = load_k8s(project, "monitoring")["PrometheusRule"]
        assert [r["alert"] for g in operator["spec"]["groups"] for r in g["rules"]] == ruled
    if answers.ecs:
        queues = load_cfn(project / "deploy" / "aws" / "queues.yaml")["Resources"]
        service = load_cfn(project / "deploy" / "ecs" / "service.yaml")["Resources"]
        # The alarms that page (not the step scaling policy's, whose action is the policy).
        alarms = {
            name: resource
            for stack in (queues, service)
            for name, resource in stack.items()
            if resource["Type"] == "AWS::CloudWatch::Alarm"
            and not any(
                service.get(action.get("Ref", ""), {}).get("Type") == "AWS::ApplicationAutoScaling::ScalingPolicy"
                for action in resource["Properties"].get("AlarmActions", [])
                if isinstance(action, dict)
            )
        }
        assert sorted(alarms) == sorted(f"{name}Alarm" for name in names)
        topic = "arn:aws:sns:us-east-1:123456789012:alarms"
        for alert in table:
            alarm = alarms[f"{alert.name}Alarm"]["Properties"]
            # What CloudFormation sends, against botocore's model of PutMetricAlarm, with and
            # without a topic to notify.
            for given in ("", topic):
                stack = load_cfn(
                    project / "deploy" / ("aws/queues.yaml" if alert.stack == "queues" else "ecs/service.yaml")
                )
                resources = ECS_RESOURCES | {"Queue.QueueName": answers.queue, "DeadLetterQueue.QueueName": answers.dlq}
                resolved = cfn_resolve(alarm, cfn_names(stack, answers.region, resources) | {"AlarmTopicArn": given})
                assert api_problems("cloudwatch", "PutMetricAlarm", {"AlarmName": alert.name, **resolved}) == []
                assert resolved.get("AlarmActions", []) == ([topic] if given and alert.pages else [])
            assert alert.runbook in alarm["AlarmDescription"]
            assert alarm.get("AlarmActions") == alarm.get("OKActions")
            assert (f"{alert.name}Alarm" in queues) is (alert.stack == "queues")
            returned = [m for m in alarm.get("Metrics", []) if m.get("ReturnData")]
            assert len(returned) == (1 if "Metrics" in alarm else 0), alert.name
    rendered = {str(p.relative_to(project)) for p in project.rglob("*") if p.is_file()}
    for path in ("deploy/prometheus/alerts.yaml", "deploy/README.md", "deploy/aws/queues.yaml"):
        text = (project / path).read_text()
        for named in set(re.findall(r"deploy/[\w./-]+\.(?:ya?ml|json|md)", text)) | {
            "deploy/" + n for n in re.findall(r"\b(k8s/[\w./-]+\.yaml)", text)
        }:
            assert named in rendered, f"{path} names {named}, which this bake does not render"
    # The in-flight alert: 80 % of SQS's quota for the queue's kind.
    inflight = next(a for a in table if a.name == "SQSInFlightNearLimit")
    if answers.ecs:
        assert alarms["SQSInFlightNearLimitAlarm"]["Properties"]["Threshold"] == LIMITS.inflight_alert_threshold(
            answers.queue
        )
    assert "96000" in inflight.expr and "16000" in inflight.expr


@pytest.mark.parametrize("key", ECS_SETS)
def test_cloudwatch_dashboard_has_the_grafana_panels(projects: dict[str, Path], key: str) -> None:
    """The ECS stack's dashboard: the Grafana dashboard's panels, title for title, each over
    the same metrics, every query against the collector's namespace."""
    project, answers = projects[key], ANSWERS[key]
    grafana = json.loads((project / "deploy" / "grafana" / "dashboard.json").read_text())
    resource = load_cfn(project / "deploy" / "ecs" / "service.yaml")["Resources"]["Dashboard"]["Properties"]
    assert resource["DashboardName"] == answers.slug
    body = json.loads(resource["DashboardBody"]["Fn::Sub"].replace("${AWS::Region}", answers.region))
    assert (
        api_problems("cloudwatch", "PutDashboard", {"DashboardName": answers.slug, "DashboardBody": json.dumps(body)})
        == []
    )
    widgets = {w["properties"]["title"]: w for w in body["widgets"]}
    assert list(widgets) == [p["title"] for p in grafana["panels"]]
    for panel in grafana["panels"]:
        wanted = {
            re.sub(r"_(bucket|sum|count)$", "", n)
            for t in panel["targets"]
            if "expr" in t
            for n in promql_metric_names(t["expr"])
        }
        # SQS's own metrics, from Grafana's CloudWatch data source: the same metric in AWS/SQS.
        wanted |= {t["metricName"] for t in panel["targets"] if t.get("namespace") == "AWS/SQS"}
        metrics = widgets[panel["title"]]["properties"]["metrics"]
        queries = [m[0]["expression"] for m in metrics if isinstance(m[0], dict)]
        shown = {name for q in queries for name in re.findall(r"SELECT \w+\((\w+)\)", q)}
        shown |= {m[1] for m in metrics if isinstance(m[0], str)}
        assert shown == wanted, (panel["title"], shown, wanted)
        for query in queries:
            assert f'SCHEMA("{answers.slug}"' in query or not query.startswith("SELECT"), query
        assert widgets[panel["title"]]["properties"]["region"] == answers.region


@pytest.mark.parametrize("key", CHECKED)
def test_grafana_dashboard(projects: dict[str, Path], key: str, tmp_path: Path) -> None:
    project, answers = projects[key], ANSWERS[key]
    dashboard = json.loads((project / "deploy" / "grafana" / "dashboard.json").read_text())
    assert dashboard["title"] == answers.name and dashboard["uid"]
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    # Prometheus's targets; the others are SQS's own metrics from a CloudWatch data source
    # (test_a_standard_queue_shows_its_noisy_tenants).
    prometheus = [(p["title"], t) for p in panels for t in p["targets"] if t["datasource"]["type"] == "prometheus"]
    others = [(p["title"], t) for p in panels for t in p["targets"] if t["datasource"]["type"] != "prometheus"]
    assert all(t["datasource"]["type"] == "cloudwatch" and t["namespace"] == "AWS/SQS" for _, t in others), others
    exprs = [(title, t["expr"]) for title, t in prometheus]
    used: set[str] = set()
    for title, expr in exprs:
        assert unknown_metrics(expr) == set(), f"panel {title!r}: {expr}"
        assert f'job="{answers.slug}"' in expr, f"panel {title!r} does not select this service"
        used |= promql_metric_names(expr)
    bases = {re.sub(r"_(bucket|sum|count)$", "", n) for n in used}
    # Every metric but an info metric (labels, not a value to plot) is on a panel.
    plotted = {name for name, kind in engine_metrics().items() if kind != "info"}
    assert bases >= plotted, f"no panel shows {plotted - bases}"
    joined = "\n".join(expr for _, expr in exprs)
    for quantile in ("0.5", "0.95", "0.99"):
        assert f"histogram_quantile({quantile}, sum by (le, queue) (rate(job_duration_seconds_bucket" in joined
    assert re.search(r"by \([^)]*state[^)]*\) \(sqs_queue_messages", joined), "backlog not split by state"
    assert re.search(r"by \([^)]*outcome[^)]*\) \(rate\(jobs_processed_total", joined)
    assert re.search(r"by \([^)]*operation[^)]*outcome[^)]*\) \(rate\(sqs_api_calls_total", joined)

    # Each expression is valid PromQL: promtool parses them as recording rules, with
    # Grafana's variables replaced by values.
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {
                        "record": f"dashboard:expr_{n}",
                        "expr": expr.replace("$__rate_interval", "5m").replace("$queue", ".*"),
                    }
                    for n, (_, expr) in enumerate(exprs)
                ],
            }
        ]
    }
    rules_file = tmp_path / "dashboard-rules.yaml"
    rules_file.write_text(yaml.safe_dump(rules))
    assert check_rules(rules_file) == []


NOISY = "ApproximateNumberOfNoisyGroups"


@pytest.mark.parametrize("key", CHECKED)
def test_a_standard_queue_shows_its_noisy_tenants(projects: dict[str, Path], key: str) -> None:
    """SQS fair queues: on a standard queue (tenants as its MessageGroupId) the Grafana
    dashboard reads SQS's ApproximateNumberOfNoisyGroups of this queue from a CloudWatch
    data source, and so does the ECS stack's dashboard, and a CloudWatch alarm that pages no
    one watches it; a FIFO queue (no such metric) has neither panel, data source nor alarm."""
    project, answers = projects[key], ANSWERS[key]
    fifo = answers.queue.endswith(LIMITS.FIFO_SUFFIX)
    grafana = json.loads((project / "deploy" / "grafana" / "dashboard.json").read_text())
    targets = [t for p in grafana["panels"] for t in p["targets"] if t.get("metricName") == NOISY]
    sources = [v for v in grafana["templating"]["list"] if v["type"] == "datasource" and v["query"] == "cloudwatch"]
    if fifo:
        assert targets == [] and sources == [], f"{key}: a FIFO queue has no noisy groups to show"
    else:
        assert len(targets) == 1, f"{key}: no panel (or several) of {NOISY}"
        (target,) = targets
        assert target["namespace"] == "AWS/SQS", target
        assert target["dimensions"] == {"QueueName": [answers.queue]}, target
        assert target["datasource"] == {"type": "cloudwatch", "uid": "${" + sources[0]["name"] + "}"}, target
        assert target["region"] == answers.region, target
    # The alarm: in the queues stack (every target deploys it), on this queue's metric, for a
    # quarter of an hour; it notifies no one (it means something only with tenants).
    queues = load_cfn(project / "deploy" / "aws" / "queues.yaml")["Resources"]
    alarms = [r["Properties"] for r in queues.values() if r["Properties"].get("MetricName") == NOISY]
    if fifo:
        assert alarms == [], f"{key}: a FIFO queue has no noisy groups to alarm on"
    else:
        assert len(alarms) == 1, f"{key}: no alarm (or several) on {NOISY}"
        (alarm,) = alarms
        assert alarm["Namespace"] == "AWS/SQS", alarm
        assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["Queue", "QueueName"]}}], alarm
        assert (alarm["Threshold"], alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (0, 15, 15), alarm
        assert "AlarmActions" not in alarm and "OKActions" not in alarm, f"{key}: the noisy-groups alarm pages"
        assert "Only with tenants" in alarm["AlarmDescription"] and "not a page" in alarm["AlarmDescription"]
    if answers.ecs:
        body = load_cfn(project / "deploy" / "ecs" / "service.yaml")["Resources"]["Dashboard"]["Properties"]
        widgets = json.loads(body["DashboardBody"]["Fn::Sub"])["widgets"]
        rows = [m for w in widgets for m in w["properties"]["metrics"] if isinstance(m[0], str) and m[1] == NOISY]
        if fifo:
            assert rows == [], key
        else:
            assert [m[:4] for m in rows] == [["AWS/SQS", NOISY, "QueueName", answers.queue]], rows
