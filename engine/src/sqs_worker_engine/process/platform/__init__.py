"""What the platform reads of the worker and asks of it: /metrics, /livez and /readyz (the HTTP server), metrics pushed over OTLP, ECS task scale-in protection."""
