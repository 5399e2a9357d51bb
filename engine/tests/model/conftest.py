"""Model tests: the real engine against the in-memory SQS, on virtual time."""
