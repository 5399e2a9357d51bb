"""A fleet simulator: many replicas of the real engine against one in-memory SQS queue on
virtual time, under the platform's autoscaler as the bake's deploy files set it.

`python -m sqs_worker_engine.fleet` runs the standard traffic shapes against a service's
deploy files and writes a report (`report.md`, `report.json`, plots); a generated
service's `make simulate` runs it. docs/scaling.md in the template's repository says what
is simulated how, and what the generated defaults give.

This package sits above the engine's runtime and uses it as a service would: `Worker`,
`Router`, `load_settings`, the running loop's clock; and the engine's virtual-time loop
(`sqs_worker_engine.doubles.vtime`). Nothing in the runtime imports it.

Its folders, each a layer on the ones after it: `autoscalers/` (the deploy files as read,
KEDA and the HPA, ECS's target tracking and step scaling, the oracle, the pods and tasks
they scale), `load/` (the traffic shapes, the handlers' work and the ledger), `sqs/` (the
queue, the counts and datapoints its readers see, metric math, the prices). Above them, the
run: `sizing` (a run and its scale), `releases` (a bad release, and ECS's deployment alarms
that roll it back), `simulation` (one run, played: rollouts, crashes, Spot interruptions),
`cli`, `report` (what the run assumed, and its figures), `plots`.
"""
