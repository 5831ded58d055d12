"""Progress of a long computation, reported to whoever runs it.

On a terminal, a tqdm bar. Elsewhere (papermill's kernel, whose standard error is no terminal and
whose lines ``papermill --log-output`` forwards; a log file; a batch job) a bar's carriage returns
would pile up or show nothing, so :class:`ProgressLines` writes one plain line every ``interval``
seconds (:data:`INTERVAL`), and one at the end of a run that wrote any::

    training: step 120/500 (24 %), 3.1 steps/s, about 2 min 3 s left

The lines go to standard error, which the book's pages drop (``nb_output_stderr: remove`` in
``_config.yml``) and nbval does not compare (``notebooks/conftest.py``); they never contain tqdm's
bar ("42%|"), which ``book/generate.py`` refuses on a page. A run shorter than ``interval`` writes
nothing.

The rate counts only the steps done since this report began (a resumed run's earlier steps are
not timed here); the time left is the steps left at that rate.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Callable, TextIO

#: Seconds between two plain lines.
INTERVAL = 60.0


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def duration(seconds: float) -> str:
    """``"42 s"``, ``"2 min 3 s"``, ``"1 h 05 min"``: a duration for a reader, rounded to the second
    (to the minute from an hour on)."""
    if not math.isfinite(seconds):
        return "unknown"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    m = round(seconds / 60)
    return f"{m // 60} h {m % 60:02d} min"


class ProgressLines:
    """Steps done, rate and time left as a plain line on ``stream`` every ``interval`` seconds.

    The same three methods as a tqdm bar: ``update(n)`` (``n`` more steps done), ``close()`` (the
    final line, when any line was written) and ``n`` (steps done so far, ``initial`` included).
    """

    def __init__(self, total: int, initial: int = 0, *, desc: str = "training", unit: str = "step",
                 stream: TextIO | None = None, interval: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.total, self.n, self.desc, self.unit = int(total), int(initial), desc, unit
        self.stream = stream if stream is not None else sys.stderr
        self.interval, self.clock = float(INTERVAL if interval is None else interval), clock
        self._initial, self._start = self.n, clock()
        self._last, self._written = self._start, 0

    def line(self, now: float) -> str:
        """The line for ``self.n`` steps done at time ``now`` (seconds of ``clock``)."""
        done, elapsed = self.n - self._initial, now - self._start
        rate = done / elapsed if elapsed > 0 else math.nan
        pct = 100 * self.n // self.total if self.total > 0 else 100
        text = f"{self.desc}: {self.unit} {self.n}/{self.total} ({pct} %)"
        if self.n >= self.total:
            return text + f", done in {duration(elapsed)}" + (f" ({rate:.3g} {self.unit}s/s)" if done else "")
        if done > 0 and elapsed > 0:
            text += f", {rate:.3g} {self.unit}s/s, about {duration((self.total - self.n) / rate)} left"
        return text

    def _write(self, now: float) -> None:
        print(self.line(now), file=self.stream, flush=True)
        self._last, self._written = now, self._written + 1

    def update(self, n: int = 1) -> None:
        self.n += int(n)
        now = self.clock()
        if now - self._last >= self.interval and self.n < self.total:
            self._write(now)

    def close(self) -> None:
        if self._written:
            self._write(self.clock())


def progress_bar(total: int, initial: int = 0, *, desc: str = "training", unit: str = "step",
                 stream: TextIO | None = None, interval: float | None = None):
    """A tqdm bar when ``stream`` (default: standard error) is a terminal, else :class:`ProgressLines`
    (a line every ``interval`` seconds, default :data:`INTERVAL`).

    Both are updated with ``update(n)`` and finished with ``close()``.
    """
    stream = stream if stream is not None else sys.stderr
    if _is_terminal(stream):
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit=unit, file=stream)
    return ProgressLines(total, initial, desc=desc, unit=unit, stream=stream, interval=interval)
