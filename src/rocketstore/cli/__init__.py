"""``rocketstore`` (and ``python -m rocketstore``): the command line.

mqadmin's four message lookups answered straight from the store's files, with no broker and no
name server; consuming with committed offsets; and the chores of an operator (stats, verify,
recover, dump, export), on rocketstore's own stores and on a directory copied from a Java broker.

Every command but ``put``, ``recover``, ``quickstart`` and ``consume --commit`` opens the store
read-only: it writes no byte into it and takes no lock, so it works beside a running writer.

Exit status: 0 done; 1 an error (one line on stderr), nothing found by a lookup, or problems found
by ``verify``; 2 bad arguments; 130 interrupted; 141 the reader of the output went away.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from rocketstore.cli._common import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    CliError,
    _error,
    _os_error_text,
)
from rocketstore.cli._output import Progress, message_dict
from rocketstore.cli._parser import build_parser
from rocketstore.cli._quickstart import quickstart
from rocketstore.errors import RocketStoreError

__all__ = ["main", "build_parser", "message_dict", "Progress", "quickstart", "CliError"]


def main(argv: Optional[list[str]] = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        status = args.handler(args)
        sys.stdout.flush()
        return status
    except CliError as exc:
        _error(str(exc))
        return exc.status
    except BrokenPipeError:
        # the reader went away (`| head`): say nothing, and keep the interpreter's final flush quiet
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED
    except RocketStoreError as exc:
        _error(str(exc))
        return EXIT_ERROR
    except OSError as exc:
        _error(_os_error_text(exc))
        return EXIT_ERROR
    except UnicodeError as exc:
        _error(f"text that cannot be stored: {exc}")
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
