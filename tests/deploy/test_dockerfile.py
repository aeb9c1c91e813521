"""deploy/Dockerfile, checked without a container engine.

The build stage's COPY instructions are replayed into a temporary folder and
setuptools builds an sdist from what they copied, exactly where the Dockerfile
runs ``pip install``: a package directory that pyproject.toml names but the
Dockerfile does not copy (``svit_chaos`` -> ``chaos/``) fails here the way the
image build fails ("package directory 'chaos' does not exist"). The real build
with podman is .ci/image.sh.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "Dockerfile"


@dataclass
class Instruction:
    op: str
    args: str
    stage: str


def parse_dockerfile(path: Path = DOCKERFILE) -> tuple[list[str], list[Instruction]]:
    """(ARG lines before the first FROM, instructions tagged with their stage name)."""
    lines: list[str] = []
    buf = ""
    for raw in path.read_text().splitlines():
        if raw.lstrip().startswith("#") and not buf:
            continue
        if raw.rstrip().endswith("\\"):
            buf += raw.rstrip()[:-1] + " "
            continue
        buf += raw
        if buf.strip():
            lines.append(buf.strip())
        buf = ""
    global_args: list[str] = []
    out: list[Instruction] = []
    stage = ""
    for line in lines:
        op, _, args = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            words = args.split()
            stage = words[2] if len(words) >= 3 and words[1].upper() == "AS" else words[0]
        elif not stage and op == "ARG":
            global_args.append(args)
            continue
        out.append(Instruction(op, args.strip(), stage))
    return global_args, out


def package_dirs() -> set[str]:
    """Top-level source folders of every package pyproject.toml declares."""
    st = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = st.get("package-dir", {})
    return {mapping.get(p.split(".")[0], p.split(".")[0]) for p in st["packages"]}


def _copy_sources(args: str) -> tuple[list[str], str]:
    words = [w for w in shlex.split(args) if not w.startswith("--")]
    return words[:-1], words[-1]


def replay_build_copies(root: Path) -> Path:
    """Copy what the build stage's COPY lines copy into ``root``; return its WORKDIR."""
    _, instructions = parse_dockerfile()
    workdir = "/"
    for ins in instructions:
        if ins.stage != "build":
            continue
        if ins.op == "WORKDIR":
            workdir = ins.args
        if ins.op not in ("COPY", "ADD") or "--from" in ins.args:
            continue
        sources, dest = _copy_sources(ins.args)
        target = root / dest.lstrip("/")
        for src in sources:
            path = REPO / src
            assert path.exists(), f"COPY source {src} does not exist in the build context"
            if path.is_dir():
                shutil.copytree(path, target, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif dest.endswith("/") or len(sources) > 1:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target / path.name)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
    return root / workdir.lstrip("/")


def test_build_stage_copies_everything_pip_install_needs(tmp_path: Path) -> None:
    workdir = replay_build_copies(tmp_path / "ctx")
    for d in package_dirs():
        assert (workdir / d).is_dir(), f"the Dockerfile does not copy {d}/ (pyproject names it)"
    out = tmp_path / "dist"
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c",
         "import sys, setuptools.build_meta as b; print(b.build_sdist(sys.argv[1]))", str(out)],
        cwd=workdir, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, f"setuptools cannot build what the Dockerfile copies:\n" \
                                 f"{proc.stderr[-2000:]}"
    (sdist,) = out.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    for d in package_dirs():
        assert any(n.endswith(f"/{d}/__init__.py") for n in names), f"{d} missing from sdist"


def test_dependencies_are_their_own_layer_before_any_source() -> None:
    build = [i for i in parse_dockerfile()[1] if i.stage == "build"]
    dep = next(n for n, i in enumerate(build)
               if i.op == "RUN" and "pip install" in i.args and "constraints.txt" in i.args)
    copies = [n for n, i in enumerate(build) if i.op == "COPY"
              and any(s.rstrip("/") in package_dirs() | {"pyproject.toml"}
                      for s in _copy_sources(i.args)[0])]
    assert copies and dep < min(copies), "dependencies must install before sources are copied"
    project = [i for i in build[dep + 1:] if i.op == "RUN" and "pip install" in i.args]
    assert project and all("--no-deps" in i.args for i in project), project


def test_base_image_is_a_build_argument_defaulting_to_public_python() -> None:
    global_args, instructions = parse_dockerfile()
    base = next(a for a in global_args if a.startswith("BASE="))
    assert base.split("=", 1)[1].startswith("python:3.11-")
    froms = [i.args.split()[0] for i in instructions if i.op == "FROM"]
    assert froms and all(f == "${BASE}" for f in froms), froms


def test_runtime_is_non_root_and_carries_oci_labels() -> None:
    runtime = [i for i in parse_dockerfile()[1] if i.stage == "runtime"]
    users = [i.args for i in runtime if i.op == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    labels = " ".join(i.args for i in runtime if i.op == "LABEL")
    for key in ("source", "revision", "version"):
        assert f"org.opencontainers.image.{key}=" in labels, key
