"""Deprecated path: the module is `sqs_worker_engine.runtime.settling.decisions` (moved in 0.6, when the engine took layer
subpackages). Services baked before then import it here; this path goes in 1.0."""

import sys
import warnings

from sqs_worker_engine.runtime.settling import decisions as _moved
from sqs_worker_engine.runtime.settling.decisions import *  # noqa: F403  (what type checkers see at this path)

if __name__ != "__main__":
    warnings.warn(
        "sqs_worker_engine.decisions is deprecated: import sqs_worker_engine.runtime.settling.decisions",
        DeprecationWarning,
        stacklevel=2,
    )
    sys.modules[__name__] = _moved  # one module object under both names: a patch made through either holds
