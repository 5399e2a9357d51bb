"""Base facts every layer may use: the clock, limits, errors, metrics, events, health, the SQS client seam, logs."""
