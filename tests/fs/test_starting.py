"""fs/starting: what is printed on fd 2 while the mount starts is kept for the error line, or replayed."""

import os

import pytest

from kafkafs.fs.starting import StartingStderr, first_exception


@pytest.mark.parametrize("replay", [False, True])
def test_fd2_is_captured_then_restored(capfd, replay):
    starting = StartingStderr()
    os.write(2, b"fuse: unknown option(s): `-o bogus'\n\n  second\n")
    said = starting.restore(replay=replay)
    assert said == ["unknown option(s): `-o bogus'", "second"]
    assert starting.restore(replay=True) == said  # once only: nothing written twice
    os.write(2, b"after\n")
    err = capfd.readouterr().err
    assert err == ("fuse: unknown option(s): `-o bogus'\n\n  second\nafter\n" if replay else "after\n")


def test_first_exception_unwraps_nested_groups():
    inner = ConnectionRefusedError(111, "Connection refused")
    group = ExceptionGroup("outer", [ExceptionGroup("inner", [inner, ValueError()])])
    assert first_exception(group) is inner
    plain = OSError("x")
    assert first_exception(plain) is plain
