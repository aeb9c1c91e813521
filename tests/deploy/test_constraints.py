"""deploy/constraints.txt pins every runtime dependency pyproject.toml names.

The image installs the constraints first and then the project with
``--no-deps`` followed by ``pip check``; a dependency added to pyproject.toml
but not to the constraints (pydantic-settings, once) fails only there, minutes
into the image build of .ci/run. This catches it in the main suite. Regenerate
with deploy/update-constraints.sh.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement (PEP 503)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[([^\]]*)\])?", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match[1]).lower()


def _required() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    reqs = list(project["dependencies"]) + list(extras["cluster"]) + list(extras["mounts"])
    names = {_name(r) for r in reqs}
    # extras of a dependency bring their own packages (uvicorn[standard] -> uvloop, ...)
    if any("uvicorn[standard]" in r.replace(" ", "") for r in reqs):
        names |= {"uvloop", "httptools"}
    return names


def _pinned() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO / "deploy" / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[_name(name)] = version
    return pins


def test_every_runtime_dependency_is_pinned() -> None:
    missing = sorted(_required() - set(_pinned()))
    assert not missing, (
        f"not in deploy/constraints.txt (run deploy/update-constraints.sh): {missing}")


def test_the_check_sees_a_missing_pin() -> None:
    """Negative control: the same comparison flags a dependency that is not pinned."""
    assert "surely-not-a-pinned-package" not in _pinned()
    assert _name("Pydantic_Settings>=2") == "pydantic-settings"
