"""A fleet simulator: many replicas of the real engine against one in-memory SQS queue on
virtual time, under the platform's autoscaler as the bake's deploy files set it.

`python -m sqs_worker_engine.fleet` runs the standard traffic shapes against a service's
deploy files and writes a report (`report.md`, `report.json`, plots); a generated
service's `make simulate` runs it. docs/scaling.md in the template's repository says what
is simulated how, and what the generated defaults give.

This package sits above the engine's runtime and uses it as a service would: `Worker`,
`Router`, `load_settings`, the running loop's clock; and the engine's virtual-time loop
(`sqs_worker_engine.doubles.vtime`). Nothing in the runtime imports it.
"""
