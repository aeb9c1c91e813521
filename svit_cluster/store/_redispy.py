"""redis-py, loaded once for the whole package, without OpenTelemetry's metrics SDK.

redis-py (8.x) probes at import time whether OpenTelemetry's metrics SDK is
installed (``redis/observability/providers.py``: ``try: from
opentelemetry.sdk.metrics import MeterProvider``). The probe's result is only
kept as a flag and a type annotation there; redis-py's own metrics, when an
application turns them on (``redis.observability``), need the OpenTelemetry
*API* (``opentelemetry.metrics``, still imported) and the application's global
``MeterProvider``, never this import. svit_cluster never turns them on, and
redis-py has no setting to skip the probe. Ray's ``default`` extra installs
the SDK, so the probe would load it (about 60 modules) into every Ray worker
for nothing, and every active process is a worker of its own.

So :func:`load` imports redis-py with ``opentelemetry.sdk.metrics`` made
unimportable for the length of that one import (a ``None`` entry in
``sys.modules``, Python's documented way to make an import fail), then removes
the entry: a later ``import opentelemetry.sdk.metrics`` (an application's
metrics, or redis-py's own once enabled) works as usual. Nothing of redis-py
is patched. Nothing is hidden when redis-py or the SDK is already loaded (then
there is nothing to save). Importing this module runs :func:`load`; the store
package's ``__init__`` imports it before any of its modules imports redis-py.
"""

from __future__ import annotations

import sys

__all__ = ["OTEL_METRICS_SDK", "load"]

#: The module redis-py's import-time probe looks for.
OTEL_METRICS_SDK = "opentelemetry.sdk.metrics"


def load() -> None:
    """Import redis-py (once per process) without loading OpenTelemetry's metrics SDK.

    Another thread importing ``opentelemetry.sdk.metrics`` during this very
    import would get ``ImportError``: the store is imported at start-up, before
    any such code runs.
    """
    if "redis" in sys.modules or OTEL_METRICS_SDK in sys.modules:
        return
    sys.modules[OTEL_METRICS_SDK] = None  # type: ignore[assignment]
    try:
        import redis  # noqa: F401
    finally:
        if OTEL_METRICS_SDK in sys.modules and sys.modules[OTEL_METRICS_SDK] is None:
            del sys.modules[OTEL_METRICS_SDK]


load()
