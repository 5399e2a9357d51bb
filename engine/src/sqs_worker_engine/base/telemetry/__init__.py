"""What the worker tells the world: lifecycle events, liveness and readiness, log lines, metrics and traces (X-Ray's signing among them)."""
