"""What a fleet costs, at list prices (us-east-1): SQS requests, the replicas' compute, and
the scaler's CloudWatch reads. One place for the prices; docs/scaling.md's cost model
uses these.

- SQS: $0.40 per million requests on a standard queue, $0.50 on FIFO (each 64 KiB of a
  payload bills as one request; the simulated messages are small).
- Compute: a replica is billed for what it reserves, at AWS Fargate's rates: $0.04048 per
  vCPU-hour and $0.004445 per GiB-hour (an ECS task's Cpu and Memory; a pod's requests,
  which EKS on Fargate bills the same way and which an EC2 node's share costs about as
  much as).
- CloudWatch GetMetricData (KEDA's aws-cloudwatch trigger): $0.01 per 1,000 metrics read.
"""

from __future__ import annotations

SQS_STANDARD_PER_MILLION = 0.40
SQS_FIFO_PER_MILLION = 0.50
FARGATE_VCPU_HOUR = 0.04048
FARGATE_GIB_HOUR = 0.004445
METRICS_PER_THOUSAND = 0.01


def replica_hour(cpu: float, memory_gib: float) -> float:
    return cpu * FARGATE_VCPU_HOUR + memory_gib * FARGATE_GIB_HOUR


def costs(
    *,
    requests: float,
    metric_reads: int,
    replica_seconds: float,
    cpu: float,
    memory_gib: float,
    messages: int,
    fifo: bool = False,
) -> dict[str, float]:
    """Dollars for a run, and per million messages."""
    per_million = SQS_FIFO_PER_MILLION if fifo else SQS_STANDARD_PER_MILLION
    sqs = requests / 1e6 * per_million
    compute = replica_seconds / 3600 * replica_hour(cpu, memory_gib)
    metrics = metric_reads / 1000 * METRICS_PER_THOUSAND
    total = sqs + compute + metrics
    scale = 1e6 / messages if messages else 0.0
    return {
        "sqs_usd": round(sqs, 4),
        "compute_usd": round(compute, 4),
        "metrics_usd": round(metrics, 4),
        "total_usd": round(total, 4),
        "sqs_usd_per_million": round(sqs * scale, 4),
        "compute_usd_per_million": round(compute * scale, 4),
        "usd_per_million": round(total * scale, 4),
    }
