"""Compiling a Schema Registry's ``.proto`` text into descriptors, with ``protoc`` from the
``grpcio-tools`` wheel (a :data:`~kafkafs.format.decoders.protobuf.ProtoCompiler`).

protoc reads files, so the schemas are written into a private temporary folder (outside LOGDIR,
removed after) and protoc runs in a child process (``python -m grpc_tools.protoc``: its messages are
captured, nothing is printed by the mount or the CLI itself), with the well-known types
(``google/protobuf/*.proto``) that the wheel carries on its include path, and the files a Schema
Registry resolves by itself (:mod:`.registry_protos`: ``confluent/meta.proto``, ``google/type/*.proto``).
Nothing is downloaded.
Safe to call from any thread (each call has its own folder and process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath

from .registry_protos import BUILTIN_PROTOS

__all__ = ["compile_protos", "protoc_available"]


def protoc_available() -> bool:
    """Whether grpcio-tools (protoc) is installed."""
    try:
        import grpc_tools  # noqa: F401
    except ImportError:
        return False
    return True


def _safe(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not name.endswith(".proto") or not path.parts:
        raise ValueError(f"{name!r} is not a .proto import name")
    return path


def compile_protos(files: dict[str, str], main: str) -> bytes:
    """The serialized ``FileDescriptorSet`` of ``main`` and what it imports (``files``: import name to
    text); ValueError with protoc's first lines when it does not compile."""
    from importlib import resources

    well_known = str(resources.files("grpc_tools").joinpath("_proto"))
    with tempfile.TemporaryDirectory(prefix="kafkafs-proto-") as tmp:
        root = Path(tmp) / "src"
        for name, text in files.items():
            target = root / _safe(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, "utf-8")
        builtin = Path(tmp) / "builtin"  # after the schema's own files: a reference of the same name wins
        for name, text in BUILTIN_PROTOS.items():
            target = builtin / _safe(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, "utf-8")
        out = Path(tmp) / "set.pb"
        proc = subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", f"-I{root}", f"-I{builtin}", f"-I{well_known}",
             f"--descriptor_set_out={out}", "--include_imports", str(_safe(main))],
            capture_output=True, text=True, timeout=120, cwd=tmp, env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
        if proc.returncode != 0 or not out.exists():
            said = " ".join((proc.stderr or proc.stdout).strip().splitlines()[:3])
            raise ValueError(f"protoc: {said or 'failed'}")
        return out.read_bytes()
