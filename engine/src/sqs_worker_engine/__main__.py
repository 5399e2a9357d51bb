"""`python -m sqs_worker_engine <command>`: the engine's CLI with no service around it.

WORKER_QUEUES and WORKER_HANDLERS (`package.module:router`) must then be set; a service
normally runs its own `python -m <service>`, which passes its defaults in.
"""

import sys

from .entry import main

sys.exit(main())
