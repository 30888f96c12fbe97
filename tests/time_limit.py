"""The per-test time limit (pytest-timeout's ``timeout`` option and
``@pytest.mark.timeout``), enforced in a way a Trio test survives.

pytest-timeout's own ways do not suit Trio: its ``signal`` method raises
from a SIGALRM handler wherever the main thread is, which can be inside
Trio's run loop, leaving it half-torn-down so that every later test fails
with "Attempted to call run() from inside a run()"; its ``thread`` method
ends the whole session at the first slow test. Here a test past its limit
is interrupted as Ctrl-C would: every thread's stack is printed, then the
main thread gets SIGINT, which Trio delivers as `KeyboardInterrupt` and
unwinds cleanly, and the wrappers below turn that interrupt into the
test's failure, so the session goes on. A test that does not stop within
`GRACE` seconds of the interrupt (stuck in a thread or a system call that
ignores it) ends the session, as pytest-timeout's ``thread`` method would.

The repository's root ``conftest.py`` imports these hooks.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Generator
from typing import Any, Final

import pytest

GRACE: Final = 60.0
"""Seconds a test past its limit has to stop once interrupted."""

_WATCHDOG: Final = pytest.StashKey["Watchdog"]()


class Watchdog:
    """Interrupts the main thread once ``seconds`` have passed, unless
    cancelled first."""

    def __init__(self, nodeid: str, seconds: float) -> None:
        self.nodeid = nodeid
        self.seconds = seconds
        self.fired = False
        self._lock = threading.Lock()
        self._cancelled = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.name = f"time limit of {nodeid}"
        self._timer.daemon = True
        self._last = threading.Timer(GRACE, self._give_up)
        self._last.name = f"grace of {nodeid}"
        self._last.daemon = True

    def start(self) -> None:
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._cancelled:
                return
            self.fired = True
            sys.stderr.write(
                f"\n+++ {self.nodeid} ran past its limit of {self.seconds:g} s:"
                " the stacks of every thread, then an interrupt +++\n"
            )
            sys.stderr.flush()
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            self._last.start()
            main = threading.main_thread().ident
            assert main is not None
            signal.pthread_kill(main, signal.SIGINT)

    def _give_up(self) -> None:
        sys.stderr.write(
            f"\n+++ {self.nodeid} did not stop within {GRACE:g} s of the interrupt:"
            " ending the session +++\n"
        )
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        os._exit(1)

    def cancel(self) -> None:
        """Stops the watchdog and waits for its threads to end, so that the
        next test starts with none of this one's threads alive (a test that
        counts the threads around a call would otherwise see it end)."""
        with self._lock:
            self._cancelled = True
        # Once `_cancelled` is set under the lock, `_fire` starts nothing
        # more: whether `_last` was started is settled.
        self._timer.cancel()
        self._last.cancel()
        self._timer.join()
        if self._last.is_alive():
            self._last.join()


@pytest.hookimpl
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool:
    watchdog = Watchdog(item.nodeid, float(settings.timeout))
    item.stash[_WATCHDOG] = watchdog
    watchdog.start()
    return True


@pytest.hookimpl
def pytest_timeout_cancel_timer(item: pytest.Item) -> bool:
    watchdog = item.stash.get(_WATCHDOG, None)
    if watchdog is not None:
        watchdog.cancel()
    return True


def _interrupted(exc: BaseException) -> bool:
    if isinstance(exc, KeyboardInterrupt):
        return True
    return isinstance(exc, BaseExceptionGroup) and exc.subgroup(KeyboardInterrupt) is not None


def _as_failure(item: pytest.Item) -> Generator[None, object, object]:
    try:
        return (yield)
    except BaseException as exc:
        watchdog = item.stash.get(_WATCHDOG, None)
        if watchdog is None or not watchdog.fired or not _interrupted(exc):
            raise
        pytest.fail(f"Timeout: ran past its limit of {watchdog.seconds:g} s", pytrace=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _as_failure(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _as_failure(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _as_failure(item))
