"""Schema Registry schemas for the JSON view (SPEC §8): from the registry's own ``_schemas`` topic in a
log directory, and from a ``--schemas DIR`` of ``<id>.avsc`` / ``<id>.json`` / ``<id>.proto`` files.

Reading a log is storage work, so it lives here; the result is a format-level
:class:`~kafkafs.format.decoders.registry.SchemaRegistry` that :func:`decoder_for` takes.

In a directory, ``<id>.avsc`` is an Avro schema; ``<id>.json`` is a JSON Schema when it looks like one
(``$schema``, ``properties``, ``"type": "object"`` or another JSON Schema type name), else an Avro
schema (Avro schemas are JSON too); ``<id>.proto`` is a Protobuf schema, and every ``.proto`` file in
the folder and below it can be imported by its path relative to the folder (``import "common/money.proto";``).
Files with other names are ignored. Protobuf schemas compile with protoc from grpcio-tools
(:mod:`.protoc`) when it is installed.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import KafkafsError
from .log import Log

if TYPE_CHECKING:
    from ..format.decoders.registry import SchemaRegistry

__all__ = ["SCHEMAS_TOPIC", "load_registry", "registry_from_log", "registry_from_dir", "SchemasStamp"]

log = logging.getLogger(__name__)

#: The Schema Registry's default storage topic (``kafkastore.topic``).
SCHEMAS_TOPIC = "_schemas"

_JSON_SCHEMA_TYPES = {"object", "integer", "number", "boolean"}


def new_registry() -> SchemaRegistry:
    """An empty registry that compiles Protobuf schemas with protoc when grpcio-tools is installed."""
    from ..format.decoders.registry import SchemaRegistry  # imported when there are schemas: start-up time
    from .protoc import compile_protos, protoc_available

    return SchemaRegistry(compile_protos if protoc_available() else None)


def registry_from_log(partition_dirs: list[Path], registry: SchemaRegistry | None = None) -> SchemaRegistry:
    """Replay the ``_schemas`` partitions (normally just ``_schemas-0``) into a registry."""
    registry = new_registry() if registry is None else registry
    for directory in partition_dirs:
        log_ = Log.open(directory)
        try:
            for batch in log_.read():
                if batch.header.is_control:
                    continue
                for key, value in zip(batch.keys, batch.values, strict=True):
                    registry.apply(key, value)
        except KafkafsError as exc:  # damage: what was read before it still counts
            log.warning("%s: schemas read up to damage: %s", directory, exc)
        finally:
            log_.close()
    return registry


def _is_json_schema(obj: object) -> bool:
    if not isinstance(obj, dict):
        return False
    if "$schema" in obj or "properties" in obj or "$ref" in obj or "$id" in obj:
        return True
    kind = obj.get("type")
    return kind in _JSON_SCHEMA_TYPES or isinstance(kind, list) and all(isinstance(k, str) for k in kind) and (
        set(kind) & _JSON_SCHEMA_TYPES
    ) != set()


def registry_from_dir(directory: str | os.PathLike[str], registry: SchemaRegistry | None = None) -> SchemaRegistry:
    """Every ``<id>.avsc``, ``<id>.json`` and ``<id>.proto`` of ``directory`` by its id, and every
    ``.proto`` below it as an import."""
    import orjson

    from ..errors import InvalidName

    path = Path(directory)
    if not path.is_dir():
        raise InvalidName(f"--schemas {path}: not a directory")
    registry = new_registry() if registry is None else registry
    for entry in sorted(path.rglob("*.proto")):
        if entry.is_file() and not entry.is_symlink():
            registry.add_import(entry.relative_to(path).as_posix(), entry.read_text("utf-8", errors="replace"))
    for entry in sorted(path.iterdir()):
        stem, _, suffix = entry.name.partition(".")
        if suffix not in ("avsc", "json", "proto") or not stem.isdigit() or not entry.is_file():
            continue
        text = entry.read_text("utf-8", errors="replace")
        if suffix == "proto":
            registry.add(int(stem), text, "PROTOBUF")
            continue
        kind = "AVRO"
        if suffix == "json":
            try:
                kind = "JSON" if _is_json_schema(orjson.loads(text)) else "AVRO"
            except orjson.JSONDecodeError:
                log.warning("%s: not JSON, skipped", entry)
                continue
        registry.add(int(stem), text, kind)
    return registry


def _schemas_dirs(root: Path) -> list[Path]:
    """The ``_schemas-<n>`` partition folders of log directory ``root`` (none when it cannot be listed)."""
    dirs = []
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                name = entry.name
                if name.startswith(SCHEMAS_TOPIC + "-") and name[len(SCHEMAS_TOPIC) + 1:].isdigit() and entry.is_dir():
                    dirs.append(Path(entry.path))
    except OSError:
        pass
    return sorted(dirs)


def _files_stamp(directory: Path) -> tuple[tuple[str, int, int, int], ...]:
    """The schema files :func:`registry_from_dir` reads in ``directory``, each as (its path below it,
    inode, size, modification time); those it cannot stat are left out (looked at again next time)."""
    files = []
    for top, folders, names in os.walk(directory):
        folders.sort()
        below = os.path.relpath(top, directory)
        for name in names:
            if not name.endswith(".proto") and (below != "." or not name.endswith((".avsc", ".json"))):
                continue
            try:
                st = os.stat(os.path.join(top, name))
            except OSError:
                continue
            files.append((os.path.join(below, name), st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(sorted(files))


class SchemasStamp:
    """Whether a log directory's ``_schemas`` topic changed since it was last looked at, from its files'
    identities alone (nothing is read): the ``_schemas-<n>`` folders, and in each the name, inode, size
    and modification time of every ``.log`` file. A registry's appends (a schema registered, soft- or
    hard-deleted: a tombstone) and its broker's compaction and retention change them. The log directory
    is listed again only when its own modification time changed (a folder made or removed), so a look
    at an unchanged topic costs a stat of the log directory, a listing of each ``_schemas`` folder and a
    stat of each of its segments.

    With ``schemas_dir`` (``--schemas DIR``), also the name, inode, size and modification time of each
    of its schema files (``<id>.avsc``, ``<id>.json``, ``<id>.proto`` at its top, ``.proto`` imports
    below): a file added, replaced or edited there is a change too (a walk of DIR at each look).

    Threads: one thread at a time (the mount's poll loop)."""

    def __init__(self, logdir: str | os.PathLike[str], schemas_dir: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(logdir)
        self.schemas_dir = None if schemas_dir is None else Path(schemas_dir)
        self._root_mtime: int | None = None
        self._dirs: list[Path] = []
        self._last = self._stamp()

    def _stamp(self) -> tuple[object, ...]:
        try:
            mtime = os.stat(self.root).st_mtime_ns
        except OSError:
            mtime = None
        if mtime is None or mtime != self._root_mtime:
            self._root_mtime = mtime
            self._dirs = _schemas_dirs(self.root)
        stamp: list[tuple[str, tuple[tuple[str, int, int, int], ...] | None]] = []
        for directory in self._dirs:
            try:
                with os.scandir(directory) as entries:
                    logs = []
                    for entry in entries:
                        if entry.name.endswith(".log") and entry.is_file(follow_symlinks=False):
                            st = entry.stat(follow_symlinks=False)
                            logs.append((entry.name, st.st_ino, st.st_size, st.st_mtime_ns))
                stamp.append((directory.name, tuple(sorted(logs))))
            except OSError:
                stamp.append((directory.name, None))  # gone or unreadable: looked at again next time
        if self.schemas_dir is not None:
            stamp.append(("--schemas", _files_stamp(self.schemas_dir)))
        return tuple(stamp)

    @property
    def folders(self) -> list[Path]:
        """The ``_schemas-<n>`` folders as last looked at."""
        return list(self._dirs)

    def changed(self) -> bool:
        """True when the topic's files changed since the last call (or since this object was made)."""
        stamp = self._stamp()
        if stamp == self._last:
            return False
        self._last = stamp
        return True


def load_registry(logdir: str | os.PathLike[str], schemas_dir: str | os.PathLike[str] | None = None) -> SchemaRegistry | None:
    """The schemas of ``logdir``'s ``_schemas`` topic and of ``schemas_dir`` (its files win for an id
    both know); None when there are none, so that every topic keeps the generic fast path."""
    dirs = _schemas_dirs(Path(logdir))
    if not dirs and schemas_dir is None:
        return None  # no schemas: the decoders are not even imported
    registry = registry_from_log(dirs) if dirs else None
    if schemas_dir is not None:
        registry = registry_from_dir(schemas_dir, registry)
    return registry if registry is not None and len(registry) else None
