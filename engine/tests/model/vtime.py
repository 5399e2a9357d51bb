"""The virtual-time loop the model tests run on: the engine's own (`sqs_worker_engine.doubles.vtime`),
which the fleet simulator runs on too."""

from sqs_worker_engine.doubles.vtime import IDLE_LIMIT, VirtualTimeLoop, cancel_leftovers, run

__all__ = ["IDLE_LIMIT", "VirtualTimeLoop", "cancel_leftovers", "run"]
