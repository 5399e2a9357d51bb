"""Base facts every layer may use: the clock, backoff, limits, errors, the SQS client seam, and what the worker tells the world (telemetry/)."""
