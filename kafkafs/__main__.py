"""The ``kafkafs`` console script and ``python -m kafkafs``: the command line (:mod:`kafkafs.cli`), started
so that a Ctrl-C at any moment of its start ends it quietly (review12 R12-9).

Importing the command line and parsing its arguments takes from tens of milliseconds to a second or more
on a busy machine. A SIGINT there, as Python's KeyboardInterrupt, would land in some import: a traceback;
"Exception ignored in ..." in an object's ``__del__``; or a crash (SIGSEGV) in orjson, whose module
init does not survive a failed import of its own (ijl/orjson#310). So SIGINT is taken over before
anything else is imported: until the command starts, it ends the process at once with exit 130 (SPEC §4:
:data:`kafkafs.outcome.EXIT_INTERRUPTED`) and nothing said, as nothing has been done yet. As the command
starts, Python's handler is back (a command stops on a KeyboardInterrupt, saying what it did;
:func:`kafkafs.cli.main` turns it into the same exit 130); once the command returned, the quiet exit
is back for the interpreter's last steps. A SIGINT the process was started with ignored (``nohup``, a
background job without job control) stays ignored throughout.

What no program's code can cover: the interpreter's own start before it runs this module (with a
development install, ``site`` importing setuptools' editable finder: 10-60 ms, and far more on a loaded
machine), where a Ctrl-C is Python's (a traceback, or "Fatal Python error: init_import_site").
"""

import os
import sys

try:  # CPython's own signal module, in every process from its start: ``import signal`` would first build its
    # enums (7 ms on a busy machine, a Ctrl-C in them a traceback); its functions are the same ones
    import _signal as signal
except ImportError:  # another Python
    import signal

#: :data:`kafkafs.outcome.EXIT_INTERRUPTED` (not imported from there: that would import before SIGINT is
#: taken over; tests/cli/test_interrupted.py checks that they agree)
EXIT_INTERRUPTED = 130


def _quit(_signum: int, _frame: object) -> None:
    os._exit(EXIT_INTERRUPTED)  # nothing to flush or undo: no command has run, or it has returned


def _quiet_sigint() -> bool:
    """SIGINT ends the process at once (exit 130) where it had Python's handler; whether it did."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:  # ignored, or someone else's
        return False
    try:
        signal.signal(signal.SIGINT, _quit)
    except ValueError:  # not the main thread: signals are not this thread's to take
        return False
    return True


def _python_sigint() -> None:
    """The command starts: SIGINT is Python's KeyboardInterrupt again, which commands stop on."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def main() -> int:
    """The command line on ``sys.argv``; its exit code."""
    quiet = _quiet_sigint()
    try:
        from .cli import main as run

        code = run(on_start=_python_sigint if quiet else None)
    except KeyboardInterrupt:  # between the handler's return and cli.main's own catching of it
        code = EXIT_INTERRUPTED
    if quiet and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _quit)  # the interpreter's exit (flushing, joining threads): quiet too
    return code


if __name__ == "__main__":
    sys.exit(main())
