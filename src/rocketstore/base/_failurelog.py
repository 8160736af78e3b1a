"""Logging of a background task that keeps failing: the first failure once, with its cause,
then a count, and the recovery.

A background loop that retries every few milliseconds on a full disk would otherwise log a
traceback per attempt. :class:`FailureLog` logs the first failure (and any failure of another
kind) at ERROR, a WARNING summary at most every ``summary_every`` seconds while the task keeps
failing, and an INFO line when it succeeds again. A failure of the environment (an ``OSError``:
a full disk, a file that cannot be created) is one line, its message saying all there is; any
other failure (a defect) comes with its traceback.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

__all__ = ["FailureLog"]


class FailureLog:
    """Failures of one background task named ``what`` ("background dispatch"), logged on ``log``;
    ``meanwhile`` says what happens until it succeeds ("retried")."""

    def __init__(
        self, log: logging.Logger, what: str, meanwhile: str = "retried", summary_every: float = 60.0
    ):
        self._log = log
        self._what = what
        self._meanwhile = meanwhile
        self._summary_every = summary_every
        #: failures since the last success
        self.failures = 0
        self._cause: Optional[type[BaseException]] = None  # the class of the failure last logged at ERROR
        self._next_summary = 0.0

    def failed(self, exc: BaseException) -> None:
        """Record a failure: logged at ERROR when it is the first or of a new kind, else counted."""
        self.failures += 1
        now = time.monotonic()
        if self.failures == 1 or type(exc) is not self._cause:
            self._cause = type(exc)
            self._next_summary = now + self._summary_every
            self._log.error(
                "%s failed: %s (%s; further failures are counted)",
                self._what,
                exc,
                self._meanwhile,
                exc_info=None if isinstance(exc, OSError) else exc,
            )
        elif now >= self._next_summary:
            self._next_summary = now + self._summary_every
            self._log.warning("%s still failing after %d attempts: %s", self._what, self.failures, exc)

    def succeeded(self) -> None:
        """Record a success: logs the recovery if the task was failing."""
        if self.failures:
            self._log.info("%s recovered after %d failures", self._what, self.failures)
            self.failures = 0
            self._cause = None
