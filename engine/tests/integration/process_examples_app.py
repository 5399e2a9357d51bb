"""A service whose one handler runs in the process pool and fails every message, as an
owner's bug would, for the end-to-end check (`WORKER_HANDLERS`): the check fails while the
pool's processes run. Each records its pid in PROCESS_EXAMPLES_PIDS."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict

from sqs_worker_engine import Job, Router

router = Router()


class Crunch(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"n": 1}]})

    n: int


def crunch(job: Job[Crunch]) -> None:
    """Module level, so each handler process imports it by name."""
    with open(os.environ["PROCESS_EXAMPLES_PIDS"], "a") as handle:
        handle.write(f"{os.getpid()}\n")
    raise RuntimeError(f"cannot crunch {job.payload.n}")


router.handler("crunch", payload=Crunch, executor="process")(crunch)
