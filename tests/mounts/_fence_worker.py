"""An owner of one process in its own OS process, for the fence tests.

``python -m tests.mounts._fence_worker MODE ROOT PROCESS_ID TOKEN ...``:

* ``race ROOT PID TOKEN FIRST COUNT STRIDE LOG GO [--begin]``: wait until the
  file ``GO`` exists, (with ``--begin``: take the fence and print ``begin W``),
  then apply ``COUNT`` versions ``FIRST, FIRST+STRIDE, ...`` in order
  (``FIRST`` -1 with ``--begin``: from ``W + 1``). Each step appends
  ``"<os pid> <token> <version>"`` to ``LOG`` and holds a marker file created
  with ``O_EXCL`` while it runs (two steps at once would collide and exit 3).
  The first refused apply prints ``refused V`` and ends the loop (a stale owner
  stops). Prints ``done`` at the end.
* ``stale ROOT PID TOKEN``: take the fence, print ``ready``, wait for one line
  on stdin, then apply version 5 as ``FolderMount.write(note.txt, "from A")``
  and print the result (``True``/``False``).
"""

from __future__ import annotations

import os
import sys
import time

from svit_cluster.mounts._folder import FolderMount
from svit_cluster.mounts._model import MountPath
from svit_cluster.values import Limits


def _race(root: str, pid: str, token: int, first: int, count: int, stride: int, log: str,
          go: str, begin: bool) -> int:
    mount = FolderMount(root, writable=True)
    fence = mount.fence(pid)
    assert fence is not None
    while not os.path.exists(go):
        time.sleep(0.001)
    if begin:
        watermark = fence.begin(token)
        print(f"begin {watermark}", flush=True)
        if first < 0:
            first = watermark + 1
    marker = os.path.join(os.path.dirname(log), "in-step")

    def step_for(version: int) -> None:
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            print("overlap", flush=True)
            os._exit(3)
        os.close(fd)
        with open(log, "a") as out:
            out.write(f"{os.getpid()} {token} {version}\n")
        time.sleep(0.002)
        os.unlink(marker)

    for version in range(first, first + count * stride, stride):
        if not fence.apply(token, version, lambda v=version: step_for(v)):
            print(f"refused {version}", flush=True)
            return 0
    print("done", flush=True)
    return 0


def _stale(root: str, pid: str, token: int) -> int:
    mount = FolderMount(root, writable=True)
    fence = mount.fence(pid)
    assert fence is not None
    fence.begin(token)
    print("ready", flush=True)
    sys.stdin.readline()
    applied = fence.apply(token, 5, lambda: mount.write(MountPath.of(("note.txt",)),
                                                       "from A", Limits()))
    print(applied, flush=True)
    return 0


def main(argv: list[str]) -> int:
    mode, root, pid, token = argv[0], argv[1], argv[2], int(argv[3])
    if mode == "race":
        first, count, stride = int(argv[4]), int(argv[5]), int(argv[6])
        log, go = argv[7], argv[8]
        return _race(root, pid, token, first, count, stride, log, go, "--begin" in argv[9:])
    if mode == "stale":
        return _stale(root, pid, token)
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
