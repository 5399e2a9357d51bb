"""Message formats: payloads, envelopes, signatures, S3 offload, dead-letter records."""
