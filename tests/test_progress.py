"""iterlin.progress: a bar on a terminal, plain lines elsewhere (papermill, a log), never tqdm's bar."""

from __future__ import annotations

import io
import re

import jax
import jax.numpy as jnp
import optax
import pytest

import iterlin.progress
from iterlin.progress import ProgressLines, duration, progress_bar
from iterlin.training import train

#: book/generate.py's pattern of a progress bar on a page (tqdm's "42%|" or "[00:01<00:02").
TQDM_BAR = re.compile(r"\d+%\||\[\d+:\d\d<")


class _Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_lines_report_steps_rate_and_time_left_once_an_interval():
    out, clock = io.StringIO(), _Clock()
    p = ProgressLines(500, stream=out, interval=60, clock=clock)
    clock.t += 30
    p.update(50)
    assert out.getvalue() == ""  # not before an interval has passed
    clock.t += 30
    p.update(70)  # 120 steps in 60 s: 2 steps/s, 380 left
    clock.t += 10
    p.update(10)  # too soon for another line
    clock.t += 240
    p.update(370)
    p.close()
    lines = out.getvalue().splitlines()
    assert lines == ["training: step 120/500 (24 %), 2 steps/s, about 3 min 10 s left",
                     "training: step 500/500 (100 %), done in 5 min 10 s (1.61 steps/s)"]
    assert not any(TQDM_BAR.search(ln) for ln in lines)


def test_a_resumed_run_times_only_its_own_steps_and_a_short_run_writes_nothing():
    out, clock = io.StringIO(), _Clock()
    p = ProgressLines(100, initial=40, stream=out, interval=10, clock=clock)
    clock.t += 10
    p.update(20)
    assert out.getvalue().strip() == "training: step 60/100 (60 %), 2 steps/s, about 20 s left"
    quiet = io.StringIO()
    q = ProgressLines(100, stream=quiet, interval=10, clock=clock)
    q.update(100)
    q.close()
    assert quiet.getvalue() == ""


@pytest.mark.parametrize("seconds, text", [(0.4, "0 s"), (59.6, "1 min 0 s"), (125, "2 min 5 s"),
                                           (3 * 3600 + 5 * 60 + 20, "3 h 05 min"), (float("inf"), "unknown")])
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_a_terminal_gets_a_bar_anything_else_lines():
    bar = progress_bar(10, stream=_Terminal())
    try:
        from tqdm import tqdm

        assert isinstance(bar, tqdm)
    finally:
        bar.close()
    assert isinstance(progress_bar(10, stream=io.StringIO()), ProgressLines)


def test_training_reports_progress_on_stderr_without_a_terminal(monkeypatch, capsys):
    """``train(..., progress=True)`` under papermill (stderr no terminal): plain lines, no bar."""
    monkeypatch.setattr(iterlin.progress, "INTERVAL", 0.0)
    x = jax.random.normal(jax.random.PRNGKey(0), (8, 3))
    data = (x, x @ jnp.array([[1.0], [-2.0], [0.5]]))
    train(lambda p, x: x @ p["w"], {"w": jnp.zeros((3, 1))}, data, K=2, steps=4, optimizer=optax.sgd(0.1),
          loss="mse", eval_every=2, progress=True)
    err = capsys.readouterr().err
    assert "training: step 2/4 (50 %)" in err and "training: step 4/4 (100 %), done in" in err
    assert not TQDM_BAR.search(err)
