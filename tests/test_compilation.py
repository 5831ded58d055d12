"""JAX's persistent compilation cache (iterlin/repro/compilation.py): where it lives (per user), off switch,
that a second process reads back what the first compiled, and that a broken, foreign or forged entry
never crashes a run, never persists and never gives a run another program's results."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from iterlin.repro import compilation
from iterlin.repro.cache import user_cache_dir

#: A fresh process: turn the cache on, compile one program (slow enough to be written), report the
#: folder and JAX's cache-hit events. The input and the sum are NumPy's, so that ``f`` is the only
#: program compiled: on a loaded machine even ``jnp.ones`` compiles slower than the cache's
#: threshold, and its entry would be written and hit as well.
SCRIPT = """
import json, sys, warnings, jax, jax.numpy as jnp, numpy as np
warnings.simplefilter("always")
step = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
hits = []
jax.monitoring.register_event_listener(lambda event, **kw: hits.append(event) if "cache_hits" in event else None)
from iterlin.repro.compilation import enable_compilation_cache
path = enable_compilation_cache()
@jax.jit
def f(x):
    for i in range(60):
        x = jnp.tanh(step * (x @ x.T) / 64 + i) @ x / 64
    return x
out = float(np.asarray(f(np.ones((64, 64), np.float32))).sum())
print(json.dumps({"path": None if path is None else str(path), "hits": len(hits), "out": out}))
"""


def _run(env_value, cwd, step=1.0, xdg=None, full=False):
    """SCRIPT in a fresh process, its user cache folder ``xdg`` (default ``cwd/xdg``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env["JAX_PLATFORMS"] = "cpu"
    env["ITERLIN_COMPILATION_CACHE"] = env_value
    env["XDG_CACHE_HOME"] = str(xdg if xdg is not None else Path(cwd) / "xdg")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(step)], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return (result, proc.stderr) if full else {k: result[k] for k in ("path", "hits")}


def _entries(folder):
    """The cache entries of SCRIPT's program ``f`` (named ``jit_f-<key>…``): any other program JAX
    compiles on the way (none today) must not make a test depend on the machine's load."""
    return sorted(p for p in Path(folder).iterdir() if p.name.startswith("jit_f-"))


def test_folder_default_override_and_off(monkeypatch, tmp_path):
    monkeypatch.delenv(compilation.ENV_VAR, raising=False)
    assert compilation.compilation_cache_dir() == user_cache_dir() / "jax"  # per user, even in a checkout
    monkeypatch.setenv(compilation.ENV_VAR, str(tmp_path))
    assert compilation.compilation_cache_dir() == tmp_path
    for off in ("0", "off", "False", " no "):
        monkeypatch.setenv(compilation.ENV_VAR, off)
        assert compilation.compilation_cache_dir() is None


def test_a_second_process_reads_the_first_ones_programs(tmp_path):
    folder = tmp_path / "jax"
    first = _run(str(folder), tmp_path)
    assert first == {"path": str(folder), "hits": 0}
    assert any(folder.iterdir()), "nothing was written to the cache"
    second = _run(str(folder), tmp_path)
    assert second["hits"] >= 1


def test_off_writes_nothing(tmp_path):
    assert _run("0", tmp_path) == {"path": None, "hits": 0}
    assert not list(Path(tmp_path).rglob("*")), "the cache folder was created although turned off"


def test_a_truncated_entry_is_replaced_not_kept_forever(tmp_path):
    folder = tmp_path / "jax"
    _run(str(folder), tmp_path)
    sizes = {p.name: p.stat().st_size for p in _entries(folder)}
    assert sizes
    for p in _entries(folder):
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    assert _run(str(folder), tmp_path)["hits"] == 0  # not read, and no crash
    rewritten = {p.name: p.stat().st_size for p in _entries(folder)}
    assert rewritten.keys() == sizes.keys()
    assert all(rewritten[k] > sizes[k] // 2 for k in sizes), "the truncated entry was not replaced"
    assert _run(str(folder), tmp_path)["hits"] >= 1


@pytest.mark.parametrize("donor", ["another step size", "another user's secret"])
def test_an_entry_that_is_not_this_programs_is_never_used(tmp_path, donor):
    """An entry copied from a ``step=1`` run under the key of a ``step=0.5`` run (or a ``step=0.5``
    entry written with another user's secret): the run computes its own numbers, and no crash."""
    own, _ = _run("0", tmp_path, step=0.5, full=True)
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    _run(str(mine), tmp_path, step=0.5)
    if donor == "another step size":
        _run(str(theirs), tmp_path, step=1.0)
    else:
        _run(str(theirs), tmp_path, step=0.5, xdg=tmp_path / "other-user")
    (target,), (source,) = _entries(mine), _entries(theirs)
    shutil.copyfile(source, target)
    result, err = _run(str(mine), tmp_path, step=0.5, full=True)
    assert result["hits"] == 0 and result["out"] == own["out"]
    assert f"compilation cache entry {target} is not this program's" in err
    assert _run(str(mine), tmp_path, step=0.5)["hits"] >= 1  # replaced by its own program


def test_an_unusable_folder_or_key_warns_and_runs_without_the_cache(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for value, xdg in ((str(a_file), None), ("/proc/x", None), (str(tmp_path / "jax"), a_file)):
        result, err = _run(value, tmp_path, xdg=xdg, full=True)
        assert result["path"] is None and "cannot be used" in err and "running without it" in err, err[-2000:]
    key = tmp_path / "xdg" / "iterlin" / compilation.KEY_FILE
    key.parent.mkdir(parents=True)
    key.write_bytes(b"k" * 32)
    key.chmod(0o644)  # readable by others: not a secret
    result, err = _run(str(tmp_path / "jax"), tmp_path, full=True)
    assert result["path"] is None and "is not a private file" in err


def test_a_failed_write_leaves_no_entry(tmp_path, monkeypatch):
    cache = compilation.SignedCache(tmp_path, b"s" * 32)
    cache.put("k1", b"program")
    assert cache.get("k1") == b"program" and cache.get("k2") is None

    def disk_full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(compilation.os, "replace", disk_full)
    with pytest.warns(compilation.CompilationCacheWarning, match="could not write compilation cache entry"):
        cache.put("k2", b"other")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k1" + compilation.SUFFIX]
