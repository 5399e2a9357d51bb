"""Operator tools: the producer, redrive, queue administration, example payloads."""
