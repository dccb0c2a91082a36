"""An engine that ends the program it runs in has died: caught as it tries, in whatever process it runs.

An engine runs inside the harness's process under `--in-process`, and
inside a host process otherwise. Either way its code can end that process
on purpose: `sys.exit()` (a `SystemExit`), `os._exit()` (no exception, no
cleanup: the process is just gone, with the engine's exit status, which
under `--in-process --jobs 1` was the run's, and 0 read as a pass), or a
`KeyboardInterrupt` raised from its own code. None of these may end the
run, and none may read as the user's ^C. So around every engine call:

* `os._exit` is swapped for a function that raises `EngineExited`, a
  `BaseException`, so an engine's own `except Exception` cannot swallow it;
* SIGINT gets a handler that notes that the user pressed ^C before raising
  `KeyboardInterrupt` as Python's does, so a `KeyboardInterrupt` with no
  SIGINT behind it is the engine's own. Where that handler cannot go in
  (another thread, a handler of someone else's), every `KeyboardInterrupt`
  counts as the user's: stopping a run is the safe mistake.

`exit_cause` names what happened, or None when the exception is a real
^C or no exit at all. What is left uncaught is what no Python code can
catch (SIGKILL, a crash in C): the process then ends with a non-zero
status (-9, -11), which CI never reads as a pass.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn


class EngineExited(BaseException):
    """The engine called `os._exit(code)`, made to raise while an engine call runs."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


_real_os_exit = os._exit
_sigint_seen = threading.Event()
_watching_sigint = threading.Event()  # our handler is in place: a KeyboardInterrupt without SIGINT is the engine's


def _refuse_os_exit(status: int) -> NoReturn:
    raise EngineExited(status)


def _on_sigint(signum: int, frame: Any) -> None:
    _sigint_seen.set()
    raise KeyboardInterrupt


@contextmanager
def engine_may_not_exit() -> Iterator[None]:
    """Run an engine call so that its ways of ending the process become exceptions `exit_cause` names."""
    previous_exit = os._exit
    os._exit = _refuse_os_exit
    previous_sigint = None
    _sigint_seen.clear()
    handler = signal.getsignal(signal.SIGINT)
    if handler is signal.SIG_IGN:  # a pool worker, an engine host: no ^C can raise here, only the engine
        _watching_sigint.set()
    elif threading.current_thread() is threading.main_thread() and handler is signal.default_int_handler:
        previous_sigint = signal.signal(signal.SIGINT, _on_sigint)
        _watching_sigint.set()
    try:
        yield
    finally:
        os._exit = previous_exit
        _watching_sigint.clear()
        if previous_sigint is not None:
            signal.signal(signal.SIGINT, previous_sigint)


def exit_cause(e: BaseException) -> str | None:
    """How the engine tried to end the process, or None: not an exit, or the user's own ^C (re-raise it)."""
    if isinstance(e, SystemExit):
        return f"the engine called sys.exit({e.code!r})"
    if isinstance(e, EngineExited):
        return f"the engine called os._exit({e.code!r})"
    # Only where our handler could tell (the main thread, Python's own handler before ours): elsewhere a
    # KeyboardInterrupt may be the user's ^C, which must stop the run. Our own subclasses (OutOfTime) are not.
    if type(e) is KeyboardInterrupt and _watching_sigint.is_set() and not _sigint_seen.is_set():
        return "the engine raised KeyboardInterrupt (no ^C was pressed)"
    return None
