"""The gateway serves HTTP with uvloop + httptools."""

from __future__ import annotations

import importlib.util

import pytest
import uvicorn.protocols.http.h11_impl as h11_impl
import uvicorn.protocols.http.httptools_impl as httptools_impl
from fastapi import FastAPI

from svit_cluster.cluster import serve


def test_gateway_config_selects_uvloop_and_httptools() -> None:
    assert serve.http_stack() == ("uvloop", "httptools")
    config = serve.gateway_server_config(FastAPI(), host="127.0.0.1", port=0)
    config.load()
    assert config.loop == "uvloop"
    assert issubclass(config.http_protocol_class, httptools_impl.HttpToolsProtocol)


def test_falls_back_to_asyncio_and_h11_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "uvloop" else real(name, *a))
    assert serve.http_stack() == ("asyncio", "h11")
    config = serve.gateway_server_config(FastAPI(), host="127.0.0.1", port=0)
    config.load()
    assert config.loop == "asyncio"
    assert issubclass(config.http_protocol_class, h11_impl.H11Protocol)
