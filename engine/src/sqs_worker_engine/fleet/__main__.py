"""`python -m sqs_worker_engine.fleet --help`."""

import sys

from .cli import main

sys.exit(main())
