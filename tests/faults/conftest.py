"""The fault tests use the FUSE fixtures of tests/fs (real mounts that always unmount)."""

from tests.fs.conftest import built_logdir, logdir_copy, mounted  # noqa: F401
