"""The host API: create, list, observe, delete, inbox, snapshot and fork processes
(``/v1/processes...``). Every route that names a process depends on
:func:`~svit_cluster.gateway._access.process_access` (tenant check before any
lookup); the listing is scoped to the token's tenant itself."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse

from svit_cluster.defaults import DEFAULT_PROCESS_PAGE, PROCESS_PAGE_MAX
from svit_cluster.errors import InvalidInput, UnavailableError
from svit_cluster.gateway._access import admin_only, principal_of, process_access
from svit_cluster.gateway._auth import Principal
from svit_cluster.gateway._router import Router
from svit_cluster.process import Limits as _Limits
from svit_cluster.process import (
    Process,
    Script,
    decode_value,
    encode_value,
    from_plain_json,
    parse_path,
    script_from_value,
    strict_json_loads,
    validate_process_id,
)
from svit_cluster.store import connect, last_commit_times

__all__ = ["MAX_PROCESS_PAGE", "processes_router"]

#: ``client_id`` / ``request_id`` syntax (control protocol: envelope identifiers).
_ID_PATTERN = r"^[A-Za-z0-9._-]{1,128}$"
#: Largest ``limit`` of one page of ``GET /v1/processes``.
MAX_PROCESS_PAGE = PROCESS_PAGE_MAX


class CreateProcess(BaseModel):
    """``POST /v1/processes`` body."""

    model_config = ConfigDict(extra="ignore")
    process_id: str
    memory: Any = Field(default=None, description="initial /memory map")
    memory_encoding: str = Field(default="plain", pattern="^(plain|tagged)$")
    scripts: dict[str, Any] = Field(
        default_factory=dict, description="name -> Svit Lisp source, or {source, documentation}"
    )


class InboxMessage(BaseModel):
    """``POST /v1/processes/inbox`` body."""

    model_config = ConfigDict(extra="ignore")
    process_id: str
    message: Any = Field(description="the inbox item (plain JSON, or tagged)")
    message_encoding: str = Field(default="plain", pattern="^(plain|tagged)$")
    dedup_key: str | None = Field(
        default=None, max_length=512,
        description="deliver at most once per key (the outbox dispatcher sends the intent id)",
    )


class InboxDrop(BaseModel):
    """``POST /v1/processes/inbox/drop`` body: name the head (id and/or hash) and say why."""

    model_config = ConfigDict(extra="ignore")
    process_id: str
    message_id: str | None = Field(default=None, max_length=512,
                                   description="the head's message id ({content, id})")
    head_hash: str | None = Field(default=None, max_length=128,
                                  description="the head's content hash")
    reason: str = Field(min_length=1, max_length=512, description="why it is dropped")


class ProcessRef(BaseModel):
    model_config = ConfigDict(extra="ignore")
    process_id: str


#: Bounds of a process's own idle timeout, seconds (a second to a week).
MIN_PASSIVATE_AFTER_S, MAX_PASSIVATE_AFTER_S = 1.0, 7 * 24 * 3600.0


class Residency(BaseModel):
    """``PUT /v1/processes/residency`` body."""

    model_config = ConfigDict(extra="ignore")
    process_id: str
    passivate_after_s: float | None = Field(
        ge=MIN_PASSIVATE_AFTER_S, le=MAX_PASSIVATE_AFTER_S,
        description="idle seconds before the process passivates (releases its actor); "
                    "null: the cluster's default")


class ForkProcess(BaseModel):
    model_config = ConfigDict(extra="ignore")
    process_id: str
    new_process_id: str
    #: also share the parent's reasoning history (its acknowledged event
    #: prefix) with the child; false (default): the child starts a fresh session
    history: bool = False


def processes_router(router: Router, redis_url: str | None = None, *,
                     prefix: str = "svit") -> APIRouter:
    """The ``/v1/processes`` routes over ``router`` (errors are ``SvitError``s,
    answered by the app's handler); the listing's ``last_commit_at`` is read
    from the commit log's Redis at ``redis_url`` (None: always null)."""
    api = APIRouter(tags=["processes"])
    holder: dict[str, Any] = {}

    def commit_times(pids: list[str]) -> dict[str, float | None]:
        if redis_url is None or not pids:
            return {}
        if "c" not in holder:
            holder["c"] = connect(redis_url)
        return last_commit_times(holder["c"], pids, prefix=prefix)

    @api.post("/v1/processes", status_code=201, dependencies=[Depends(process_access)])
    async def create_process(body: CreateProcess) -> JSONResponse:
        """Create a process with initial memory and a script library.

        ``201`` with the process info; ``400`` a bad id, memory or script
        record, or a bound exceeded; ``422 script_failed`` a script that does
        not compile; ``409 conflict`` the process exists.
        """
        pid = validate_process_id(body.process_id)
        lim = _Limits()
        memory = (
            decode_value(body.memory) if body.memory_encoding == "tagged"
            else from_plain_json(body.memory)
        ) if body.memory is not None else {}
        scripts: dict[str, Script] = {}
        for name, src in body.scripts.items():
            scripts[name] = script_from_value(
                src if isinstance(src, dict) else {"source": src}, lim
            )
        # The whole initial state is checked here, as the owner will build it,
        # before the router places anything: a create that can never succeed
        # costs no ownership claim and no process actor.
        await asyncio.to_thread(Process.create, pid, limits=lim, memory=memory,
                                scripts=dict(scripts))
        info = await router.create(pid, memory, scripts)
        return JSONResponse(info, status_code=201)

    @api.get("/v1/processes")
    async def list_processes(
        request: Request,
        limit: int = Query(DEFAULT_PROCESS_PAGE, ge=1, le=MAX_PROCESS_PAGE,
                           description="processes per page"),
        after: str | None = Query(None, max_length=600,
                                  description="the previous page's `next` cursor"),
        tenant: str | None = Query(None, min_length=1, max_length=256, pattern="^[^/]+$",
                                   description="only this tenant's processes (admin; a "
                                               "tenant token always sees its own only)"),
    ) -> JSONResponse:
        """One page of the existing processes:
        ``{"processes": [{"process_id", "version", "active", "host", "token",
        "last_commit_at"}], "next"}``.

        A tenant token lists its own tenant's processes only (a ``tenant``
        naming another one is 403); an admin token lists every tenant's, or
        one tenant's with ``tenant``. ``next`` is the cursor of the next page
        (pass it as ``after``), null on the last page; a page may hold fewer
        than ``limit`` processes (even none) before the last one, since each
        page does a bounded amount of work. ``active``/``host``: whether an
        owner serves the process now, and where (the gateway's route cache).
        ``token``: the owner's fencing token (null when not active).
        ``last_commit_at``: when it last committed (unix seconds, Redis clock;
        ``store.last_commit_times``, one pipelined read per page), null when
        unknown: no commit since creation, a reasoning session's signals
        since, no Redis URL, or that read failed (the page is still answered).
        A process that exists for the whole listing is listed at least once.
        """
        principal = principal_of(request)
        if not principal.admin:
            if principal.tenant is None or principal.observe is not None or \
                    (tenant is not None and tenant != principal.tenant):
                denied = admin_only(request, "other tenants' processes")
                assert denied is not None
                return denied
            tenant = principal.tenant
        page = await router.list_processes(tenant=tenant, limit=limit, cursor=after)
        processes = page["processes"]
        try:
            times = await asyncio.to_thread(
                commit_times, [str(p["process_id"]) for p in processes])
        except (UnavailableError, InvalidInput):
            times = {}
        return JSONResponse({"processes": [{**p, "last_commit_at": times.get(p["process_id"])}
                                           for p in processes],
                             "next": page["next"]})

    @api.put("/v1/processes/residency", dependencies=[Depends(process_access)])
    async def set_residency(body: Residency) -> JSONResponse:
        """Set how long the process may stay active while idle (see ``docs/capacity.md``:
        each active process holds a Ray worker of its host's budget)."""
        pid = validate_process_id(body.process_id)
        return JSONResponse(await router.set_residency(
            pid, passivate_after_s=body.passivate_after_s))

    @api.get("/v1/processes/state", dependencies=[Depends(process_access)])
    async def state(
        process_id: str = Query(..., description="svit:// process id"),
        path: str = Query("/", description="absolute path, e.g. /memory/count"),
    ) -> JSONResponse:
        """Value and version of ``path`` from one observation."""
        pid = validate_process_id(process_id)
        parse_path(path)
        value, version = await router.state(pid, path)
        return JSONResponse(
            {"process_id": pid, "path": path, "version": version, "value": encode_value(value)}
        )

    @api.get("/v1/processes/requests")
    async def request_status(
        principal: Annotated[Principal, Depends(process_access)],
        process_id: str = Query(..., description="svit:// process id"),
        client_id: str = Query(..., pattern=_ID_PATTERN, description="envelope client_id"),
        request_id: str = Query(..., pattern=_ID_PATTERN, description="envelope request_id"),
    ) -> JSONResponse:
        """Did this principal's request ``(client_id, request_id)`` commit?

        Answers from the owner's retained log after the receipt may have been
        evicted: ``{process_id, client_id, request_id, committed, version,
        retained_from_version}``; ``committed: false`` is definitive only for
        versions ``>= retained_from_version``. Partitioned by the
        authenticated principal, like receipts.
        """
        pid = validate_process_id(process_id)
        status = await router.request_status(pid, principal.partition, client_id, request_id)
        return JSONResponse({"process_id": pid, "client_id": client_id,
                             "request_id": request_id, **status})

    @api.delete("/v1/processes", dependencies=[Depends(process_access)])
    async def delete_process(
        process_id: str = Query(..., description="svit:// process id"),
    ) -> JSONResponse:
        """Delete a process: its log, snapshot, receipts, outbox, signals and owner record.

        Fenced like a commit: the current owner deletes under its fencing
        token, and the stored fence stays as a tombstone, so an older owner
        can never write the process back. Intents not yet delivered are
        dropped. ``200 {process_id, deleted: true, version}``; ``404`` when
        there is no such process (also the answer to a retry of a delete that
        did happen); ``503`` when the outcome is unknown (retry).
        """
        pid = validate_process_id(process_id)
        result = await router.delete(pid)
        return JSONResponse({"process_id": pid, "deleted": True,
                             "version": result.get("version")})

    @api.post("/v1/processes/inbox", dependencies=[Depends(process_access)])
    async def inbox(body: InboxMessage) -> JSONResponse:
        """Commit one message to the process inbox, under the fence; size-checked first."""
        pid = validate_process_id(body.process_id)
        message = (
            decode_value(body.message) if body.message_encoding == "tagged"
            else from_plain_json(body.message)
        )
        result = await router.inbox(pid, message, body.dedup_key)
        return JSONResponse({"process_id": pid, **result})

    @api.post("/v1/processes/inbox/drop", dependencies=[Depends(process_access)])
    async def inbox_drop(body: InboxDrop) -> JSONResponse:
        """Dead-letter the inbox head (a message whose turn never succeeds blocks the
        agent): it moves to ``/thread/dead_letters`` in one fenced commit. The head
        must match ``message_id``/``head_hash`` (else 409 ``inbox_conflict``)."""
        pid = validate_process_id(body.process_id)
        if body.message_id is None and body.head_hash is None:
            raise InvalidInput("name the inbox head to drop: message_id or head_hash")
        result = await router.inbox_drop(pid, reason=body.reason, message_id=body.message_id,
                                         head_hash=body.head_hash)
        return JSONResponse({"process_id": pid, **result})

    @api.post("/v1/processes/snapshot", dependencies=[Depends(process_access)])
    async def snapshot(body: ProcessRef) -> JSONResponse:
        """The process snapshot (strict JSON document)."""
        pid = validate_process_id(body.process_id)
        data = await router.snapshot(pid)
        doc = strict_json_loads(data, what="snapshot")
        return JSONResponse({"process_id": pid, "version": doc["version"], "snapshot": doc})

    @api.post("/v1/processes/fork", status_code=201, dependencies=[Depends(process_access)])
    async def fork(body: ForkProcess) -> JSONResponse:
        """Fork a process into a new id (same version, new identity, empty outbox).

        ``history: true`` also gives the child the parent's acknowledged event
        prefix (see ``Router.fork``). ``404`` unknown parent, ``409`` the child
        exists."""
        pid = validate_process_id(body.process_id)
        new_pid = validate_process_id(body.new_process_id)
        info = await (router.fork(pid, new_pid, history=True) if body.history
                      else router.fork(pid, new_pid))
        return JSONResponse(info, status_code=201)

    return api
