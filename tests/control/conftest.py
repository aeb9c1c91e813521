from __future__ import annotations

import pytest

from svit_cluster.control import MemoryBackend, ProcessController
from svit_cluster.process import Process
from tests.control._support import COUNTER, PID


@pytest.fixture
def counter() -> Process:
    return Process.create(PID, memory={"count": 0}, scripts={"counter": COUNTER})


@pytest.fixture
def controller(counter: Process) -> ProcessController:
    return ProcessController(counter, MemoryBackend(max_receipts=256))
