"""The engine's own version, as installed (what `worker_info{engine_version=...}` reports)."""

from importlib.metadata import PackageNotFoundError, version

try:
    ENGINE_VERSION = version("sqs-worker-engine")
except PackageNotFoundError:  # imported from a source tree that was never installed
    ENGINE_VERSION = "0.0.0+unknown"
