"""``python -m rocketstore``: the command line of :mod:`rocketstore.cli`."""

import sys

from rocketstore.cli import main

if __name__ == "__main__":
    sys.exit(main())
