"""A service's `__main__` the way a generated one is: `python -m tests.service <command>` is
what the subprocess tests run, as a platform runs `python -m <service>`. Nothing heavy is
imported before the entry point keeps stop signals: the defaults are named, not imported."""

import sys

from sqs_worker_engine.entry import main

if __name__ == "__main__":
    sys.exit(main("tests.service_defaults:SERVICE"))
