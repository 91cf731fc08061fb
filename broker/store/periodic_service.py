"""A daemon thread that runs one pass of its work every interval (the store's and the broker's background
services)."""

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable

from common.storage_refusal import is_storage_failure

log = logging.getLogger(__name__)

SHUTDOWN_WAIT_S = 10.0


class FailedPassLog:
    """How a background loop logs a failed pass: the environment's failure on one line, a bug with its traceback.
    A failure like the last one is not logged again until a pass succeeds (a full disk fails every pass)."""

    def __init__(self, logger: logging.Logger, event: str,
                 is_environmental: Callable[[Exception], bool] = is_storage_failure) -> None:
        """``is_environmental(exc)``: whether a failure is the environment's (one line) rather than a bug's."""
        self._logger = logger
        self._event = event  # e.g. "service_failed service=dispatcher-flush"
        self._is_environmental = is_environmental
        self._last_error = ""

    def failed(self, exc: Exception) -> None:
        error = repr(exc)
        if error == self._last_error:
            return
        self._last_error = error
        if self._is_environmental(exc):  # the disk (or a backend) said no: the reason is the whole story
            self._logger.error("%s error=%r", self._event, exc)
        else:
            self._logger.error("%s", self._event, exc_info=exc)

    def succeeded(self) -> None:
        self._last_error = ""


class PeriodicService(ABC, threading.Thread):
    """A daemon thread that calls :meth:`run_once` every ``interval_s`` (or at once when woken) until shut down.
    A failure is logged when it first happens, not at every pass while it lasts (a full disk fails each one)."""

    def __init__(self, name: str, interval_s: float) -> None:
        super().__init__(name=name, daemon=True)
        self.interval_s = interval_s
        self._stopped = threading.Event()
        self._wakeup = threading.Event()
        self._failures = FailedPassLog(log, f"service_failed service={name}", self.is_environmental)

    def run(self) -> None:
        while True:
            self._wakeup.wait(self.interval_s)
            self._wakeup.clear()
            if self._stopped.is_set():
                return
            try:
                self.run_once()
                self._failures.succeeded()
            except Exception as exc:
                self._failures.failed(exc)

    is_environmental = staticmethod(is_storage_failure)  # a subclass may count more as the environment's

    def wake(self) -> None:
        """Run a pass now instead of at the end of the interval."""
        self._wakeup.set()

    @abstractmethod
    def run_once(self) -> object:
        """One pass of the service's work."""

    def request_stop(self) -> None:
        """No pass after the one running (if any): :meth:`shutdown` then waits for it."""
        self._stopped.set()
        self._wakeup.set()

    def shutdown(self) -> None:
        self.request_stop()
        if self.is_alive():
            self.join(timeout=SHUTDOWN_WAIT_S)
            if self.is_alive():  # a pass waits on something (a tier's backend): the stop goes on without it
                log.warning("service_stop_timeout service=%s waited_s=%g: a pass is still running", self.name,
                            SHUTDOWN_WAIT_S)
