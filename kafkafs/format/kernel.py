"""The compiled record kernel (``_kernel``, C), when it is built; None otherwise.

The kernel decodes the records section of a v2 batch and renders its JSON lines in one pass, byte for
byte as the Python reference (:mod:`.records`, :mod:`.jsonembed`, :mod:`.jsonrender`) does. Callers go
through :mod:`.batch` and :mod:`.jsonview`, which fall back to the reference when :data:`KERNEL` is
None (a machine where the extension was not built); :func:`missing_note` is the one line to warn with.
"""

from __future__ import annotations

try:
    from . import _kernel as KERNEL  # noqa: N812
    _MISSING = None
except ImportError as exc:  # pragma: no cover - depends on the build
    KERNEL = None
    _MISSING = str(exc)

__all__ = ["KERNEL", "missing_note"]


def missing_note() -> str | None:
    """One line saying the kernel is missing and what that costs, or None when it is built."""
    if KERNEL is not None:
        return None
    return (
        "the compiled record kernel (kafkafs.format._kernel) is not built; rendering uses the slower "
        f"Python reference ({_MISSING}). Rebuild with: pip install -e ."
    )
