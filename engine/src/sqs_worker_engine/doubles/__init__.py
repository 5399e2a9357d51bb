"""Test doubles and end-to-end proof: the in-memory SQS, emulators, virtual time, the service check."""
