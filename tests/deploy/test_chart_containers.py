"""The chart's own commands, run in the built image.

Marked ``container``: the default ``python -m pytest`` deselects it (see
``addopts`` in pyproject.toml). ``.ci/run`` builds the image with
``.ci/image.sh`` and then runs ``python -m pytest -s -m container tests/deploy``.

The work is done by ``.ci/chart-containers.py`` (one script, so it also runs by
hand): etcd x3 and Redis with the chart's env/config as local processes (their
upstream images cannot be pulled here), the Ray head, two worker hosts, the
gateway and the dispatcher as podman containers of the image with the rendered
command, args, environment and probes; then the probes, the ``helm test``
command, a webhook delivery, etcd member 0 stopped, and a SIGTERM move timed
against the lease TTL. The script exits non-zero on the first failure, after
printing every container's and process's log tail, and removes everything it
started. Needs podman, runc, the image (``IMAGE``, default
``localhost/svit-cluster:ci``) and Helm (``HELM_BIN``, default ``.helm/bin/helm``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".ci" / "chart-containers.py"


@pytest.mark.container
@pytest.mark.timeout(1200)
def test_chart_runs_in_containers() -> None:
    proc = subprocess.Popen([sys.executable, str(SCRIPT)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # streamed: with -s, CI shows each step's time as it happens
        print(line, end="", flush=True)
        lines.append(line)
    rc = proc.wait()
    assert rc == 0, "chart-containers failed:\n" + "".join(lines[-80:])
    assert any("chart-containers: OK" in line for line in lines)
