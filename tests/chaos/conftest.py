"""Redis fixtures of the chaos harness's tests.

The harness's log reader, observer and stale writer use only per-process keys
(one hash slot each) and one-slot ``MULTI`` pipelines, so they work on a Redis
Cluster as on one server. ``rclient`` here is the suite-wide
fixture, parametrised over {single, cluster}; ``single_rclient`` stays for tests
that need the one shared redis-server (a ``kill -9`` of it, say).
"""

from __future__ import annotations
