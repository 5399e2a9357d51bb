"""`python -m {{ cookiecutter.package_name }} <command>`: the engine's command line with this service's defaults.

The defaults are named rather than imported here: the entry point first keeps SIGTERM, so
a stop that arrives while the service is still starting is answered with a clean exit.
"""

import sys

from sqs_worker_engine.entry import main

sys.exit(main("{{ cookiecutter.package_name }}.service:SERVICE"))
