"""``python -m kafkafs COMMAND ...``: the command line (:mod:`kafkafs.cli`), e.g. ``python -m kafkafs mount``."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
