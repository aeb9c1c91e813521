"""The operator's mount grants: which mounts a deployment has and which processes get them.

One :class:`MountsConfig` per deployment (``ClusterConfig.mounts``, the local
cluster's ``cluster.json`` ``mounts`` list, the Helm values' ``mounts:`` list
rendered into ``SVIT_MOUNTS_JSON``). Nothing is mounted by default, and a guest
can never create a mount: a process gets exactly the grants whose
``processes`` patterns match its id, on every host that activates it.

A grant, as JSON::

    {"name": "workspace", "kind": "writable_folder", "source": "/srv/workspace",
     "processes": ["svit://acme/*"]}
    {"name": "customers", "kind": "sql_query", "label": "customers by region",
     "dsn_env": "CUSTOMERS_DSN", "query": "SELECT id, name FROM customers WHERE region = %s",
     "params": ["eu"], "processes": ["svit://acme/support-*"]}
    {"name": "policy", "kind": "value", "value": {"max_refund": 50}, "processes": ["*"]}
"""

from __future__ import annotations

import fnmatch
import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from svit_cluster.errors import ConfigurationError, MountUnavailable, SvitError
from svit_cluster.mounts._folder import FolderMount
from svit_cluster.mounts._model import (
    MAX_MOUNTS,
    MountDescriptor,
    MountProvider,
    validate_mount_name,
)
from svit_cluster.mounts._sql import SqlQueryMount
from svit_cluster.mounts._value import ValueMount
from svit_cluster.values import Limits

__all__ = ["MountGrant", "MountsConfig"]

JsonScalar = str | int | float | bool | None


class MountGrant(BaseModel):
    """One granted mount.

    Attributes:
        name: the mount name (``/mounts/<name>``): 1-64 of ``A-Z a-z 0-9 _ -``.
        kind: ``folder`` (read-only directory), ``writable_folder``,
            ``sql_query`` (read-only PostgreSQL query) or ``value`` (static).
        processes: ``fnmatch`` patterns on the process id (``svit://acme/*``);
            at least one. The grant applies to a process whose id matches one.
        source: folders: the directory, the same path on every host (in
            Kubernetes a ReadWriteMany volume mounted at the same place).
        label: what the descriptor discloses as ``source`` for ``sql_query``
            (required) and ``value`` (default: the name); never a credential.
        dsn, dsn_env: ``sql_query``: the PostgreSQL connection string, or the
            name of the environment variable that holds it on every host
            (keeps the password out of the configuration). Exactly one.
        query, params: ``sql_query``: one statement with ``%s`` placeholders,
            and their values (bound by the driver, never formatted in).
        statement_timeout_ms: ``sql_query``: server-side bound (1..600 000).
        cache_ttl_s: ``sql_query``: seconds the rows are kept before the
            query runs again (0..86 400).
        value: ``value``: the static value.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: Literal["folder", "writable_folder", "sql_query", "value"]
    processes: list[str] = Field(min_length=1, max_length=64)
    source: str | None = None
    label: str | None = Field(default=None, max_length=1024)
    dsn: SecretStr | None = None
    dsn_env: str | None = None
    query: str | None = Field(default=None, max_length=65_536)
    params: list[JsonScalar] = Field(default_factory=list, max_length=256)
    statement_timeout_ms: int = Field(default=5_000, ge=1, le=600_000)
    cache_ttl_s: float = Field(default=30.0, ge=0, le=86_400)
    value: Any = None

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        try:
            return validate_mount_name(name)
        except SvitError as exc:
            raise ValueError(exc.message) from None

    def model_post_init(self, _context: Any) -> None:
        need = {"folder": ("source",), "writable_folder": ("source",),
                "sql_query": ("label", "query"), "value": ()}[self.kind]
        for field in need:
            if not getattr(self, field):
                raise ValueError(f"a {self.kind} mount needs {field}")
        if self.kind == "sql_query" and (self.dsn is None) == (self.dsn_env is None):
            raise ValueError("a sql_query mount needs exactly one of dsn and dsn_env")
        if self.kind in ("folder", "writable_folder") and not os.path.isabs(self.source or ""):
            raise ValueError("a folder mount's source must be an absolute path")

    def descriptor(self) -> MountDescriptor:
        """The identity this grant commits under ``/mounts/<name>``, known without
        reaching the source (so a mount whose source is down still shows, as
        ``attached: false``). A folder's source is its path with links resolved
        as far as they exist, as :class:`FolderMount` reports it."""
        if self.kind in ("folder", "writable_folder"):
            return MountDescriptor("folder", os.path.realpath(self.source or ""), "local",
                                   "read-write" if self.kind == "writable_folder" else "read")
        if self.kind == "value":
            return MountDescriptor("value", self.label or self.name, "cache", "read")
        return MountDescriptor("sql-query", self.label or self.name, "cache", "read")

    def matches(self, process_id: str) -> bool:
        """Whether this grant applies to ``process_id``."""
        return any(fnmatch.fnmatchcase(process_id, p) for p in self.processes)

    def provider(self, limits: Limits) -> MountProvider:
        """Build this grant's provider on the serving host.

        Raises:
            InvalidMount: a folder that does not exist or is not a directory.
            MountUnavailable: ``dsn_env`` names an unset variable.
            InvalidInput, LimitExceeded: a ``value`` that is not a plain value
                or exceeds ``limits``.
        """
        if self.kind in ("folder", "writable_folder"):
            return FolderMount(self.source or "", writable=self.kind == "writable_folder")
        if self.kind == "value":
            return ValueMount("value", self.label or self.name, self.value, limits)
        dsn = (self.dsn.get_secret_value() if self.dsn is not None
               else os.environ.get(self.dsn_env or ""))
        if not dsn:
            raise MountUnavailable(f"mount {self.name}: environment variable "
                                   f"{self.dsn_env} is not set on this host")
        return SqlQueryMount(dsn=dsn, query=self.query or "", params=list(self.params),
                             label=self.label or self.name,
                             statement_timeout_ms=self.statement_timeout_ms,
                             cache_ttl_s=self.cache_ttl_s)


class MountsConfig(BaseModel):
    """Every mount grant of a deployment (at most 64, unique names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    grants: list[MountGrant] = Field(default_factory=list, max_length=MAX_MOUNTS)

    @field_validator("grants")
    @classmethod
    def _unique(cls, grants: list[MountGrant]) -> list[MountGrant]:
        names = [g.name for g in grants]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"mount names must be unique: {', '.join(dup)}")
        return grants

    @classmethod
    def parse(cls, doc: Any) -> MountsConfig:
        """Validate a plain ``mounts`` list of grants (None or ``[]`` mounts nothing).

        Raises:
            ConfigurationError: not a list; or unknown keys, missing fields, bad
                names or values: every problem (at most 8), each naming its
                grant (index and name) and field.
        """
        if doc is not None and not isinstance(doc, list):
            raise ConfigurationError("bad mount grants: expected a JSON list of grants "
                                     "(docs/mounts.md)")
        grants = list(doc or [])
        try:
            return cls.model_validate({"grants": grants})
        except ValidationError as exc:
            problems = [_problem(grants, err) for err in exc.errors()[:8]]
            raise ConfigurationError("bad mount grants: " + "; ".join(problems)
                                     + " (docs/mounts.md)") from None

    def check_sources(self) -> None:
        """Check, on this machine, that every folder grant's source is a directory
        (``svit-cluster up``: every local host shares this file system; a
        Kubernetes host checks nothing here, its volumes exist only in its pods).

        Raises:
            ConfigurationError: the first folder source that is not a directory.
        """
        for g in self.grants:
            if g.kind in ("folder", "writable_folder") and not os.path.isdir(g.source or ""):
                raise ConfigurationError(
                    f"bad mount grants: grant {g.name}: source {g.source} is not a "
                    "directory on this machine; create it first")

    def for_process(self, process_id: str) -> list[MountGrant]:
        """The grants that apply to ``process_id``, in configuration order."""
        return [g for g in self.grants if g.matches(process_id)]


def _problem(grants: list[Any], err: Any) -> str:
    """One validation problem: ``grant 0 (workspace), field processes: Field required``."""
    loc = list(err["loc"])[1:]  # ("grants", index, field...) without "grants"
    where = "grants"
    if loc and isinstance(loc[0], int):
        index = loc.pop(0)
        entry = grants[index] if index < len(grants) else None
        name = entry.get("name") if isinstance(entry, dict) else None
        where = f"grant {index}" + (f" ({name})" if isinstance(name, str) else "")
    field = ".".join(str(p) for p in loc)
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err.get("type") == "model_type":
        msg = "must be an object of grant fields"
    return f"{where}{', field ' + field if field else ''}: {msg}"
