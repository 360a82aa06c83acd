"""Which phase an evaluation is in, for the commands that wait on one.

The worker tells its parent each stage it enters (``Channel.stage`` in
worker.py: "import", "load reference", "input set 'get_inputs', trial 0",
"timing", ...); ``converse`` (sandbox.py) passes each to :func:`report`, and
an in-place evaluation adds its own steps around the worker's (the tree copy,
the project's tests, one comparison per dtype: :func:`step`). Nothing is
shown unless a command listens: :class:`PhaseLine` (``kernelsmith eval``,
the ``evolve`` seed step, ``task init``) keeps one line on stderr that says
the current phase and how long it has run, updated each second on a
terminal; with ``lines=True`` (``-v``, or ``task init``) it prints each phase
with its time when the phase ends, which also works in a log file.

Listeners are process-wide: the commands that use them run one evaluation
at a time. A server that runs several at once (the evaluation daemon, which
streams each request's stages back to its client) routes them with
:func:`routed`: a listener of the current context, which the Evaluator's
threads inherit (``Evaluator.submit`` runs each evaluation in a copy of the
caller's context).
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import threading
import time
from typing import Callable, Iterator, Optional, TextIO

_lock = threading.Lock()
_listeners: list[Callable[[str], None]] = []
#: the in-place evaluation's current steps, around the worker's stages: per
#: context, so that evaluations side by side (an in-place task's dtypes, the
#: loop's concurrent proposals) each keep their own
_outer: "contextvars.ContextVar[tuple[str, ...]]" = contextvars.ContextVar("ks_phase_outer", default=())
_route: "contextvars.ContextVar[Optional[Callable[[str], None]]]" = contextvars.ContextVar(
    "ks_phase_route", default=None
)


def report(stage: str) -> None:
    """The evaluation entered ``stage`` (told to every listener)."""
    outer = _outer.get()
    with _lock:
        listeners = list(_listeners)
    name = f"{outer[-1]}: {stage}" if outer else stage
    own = _route.get()
    if own is not None:
        listeners.append(own)
    for listener in listeners:
        listener(name)


@contextlib.contextmanager
def routed(listener: Callable[[str], None]) -> Iterator[None]:
    """``listener`` hears the stages of the evaluations this context (and
    the Evaluator threads it hands work to) runs, and no others."""
    token = _route.set(listener)
    try:
        yield
    finally:
        _route.reset(token)


@contextlib.contextmanager
def step(name: str) -> Iterator[None]:
    """A step of its own (``project tests``) that the worker's stages, if
    any, are shown inside of (``comparison bfloat16: load reference``)."""
    report(name)
    token = _outer.set(_outer.get() + (name,))
    try:
        yield
    finally:
        _outer.reset(token)


@contextlib.contextmanager
def listening(listener: Callable[[str], None]) -> Iterator[None]:
    with _lock:
        _listeners.append(listener)
    try:
        yield
    finally:
        with _lock:
            _listeners.remove(listener)


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 100 else f"{value:.0f} s"


class PhaseLine:
    """Shows the phase of the evaluation a command waits for, on ``stream``.

    ``live``: one line rewritten in place every ``every_s`` (a terminal; off
    by default elsewhere, where ``\\r`` would litter a log). ``lines``: each
    phase printed with its duration when it ends. :attr:`durations` keeps
    (phase, seconds) in order either way."""

    def __init__(
        self,
        label: str,
        *,
        stream: Optional[TextIO] = None,
        live: Optional[bool] = None,
        lines: bool = False,
        lines_stream: Optional[TextIO] = None,
        every_s: float = 1.0,
        indent: str = "  ",
    ) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.lines = lines
        self.lines_stream = lines_stream if lines_stream is not None else self.stream
        self.every_s = every_s
        self.indent = indent
        self.durations: list[tuple[str, float]] = []
        self._current: Optional[str] = None
        self._since = 0.0
        self._started = 0.0
        self._width = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._listening: Optional[contextlib.AbstractContextManager] = None

    # -- the listener ----------------------------------------------------
    def __call__(self, phase: str) -> None:
        with self._lock:
            if phase == self._current:
                return
            now = time.monotonic()
            self._end_current(now)
            self._current, self._since = phase, now
            if self.live:
                self._draw(now)

    def _end_current(self, now: float) -> None:
        if self._current is None:
            return
        spent = now - self._since
        self.durations.append((self._current, spent))
        if self.lines:
            self._clear()
            print(f"{self.indent}{self._current}: {_seconds(spent)}", file=self.lines_stream, flush=True)
        self._current = None

    def _draw(self, now: float) -> None:
        text = (
            f"{self.label}: {self._current or 'starting'} {_seconds(now - self._since)} "
            f"(total {_seconds(now - self._started)})"
        )
        pad = " " * max(0, self._width - len(text))
        self._width = len(text)
        self.stream.write("\r" + text + pad)
        self.stream.flush()

    def _clear(self) -> None:
        if self.live and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def _tick(self) -> None:
        while not self._stop.wait(self.every_s):
            with self._lock:
                self._draw(time.monotonic())

    # -- use -------------------------------------------------------------
    def __enter__(self) -> "PhaseLine":
        self._started = time.monotonic()
        self._listening = listening(self)
        self._listening.__enter__()
        if self.live:
            self._thread = threading.Thread(target=self._tick, name="ks-phase-line", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop listening and showing (the phase going on counts until now); idempotent."""
        if self._listening is None:
            return
        self._listening.__exit__(None, None, None)
        self._listening = None
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._end_current(time.monotonic())
            self._clear()

    def summary(self) -> str:
        """The phases and their times on one line (what ``lines`` printed one by one)."""
        return ", ".join(f"{name} {_seconds(s)}" for name, s in self.durations)


__all__ = ["PhaseLine", "listening", "report", "step"]
