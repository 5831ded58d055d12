"""JAX's persistent compilation cache (iterlin/compilation.py): where it lives, off switch, and that a
second process reads back what the first compiled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from iterlin import compilation
from iterlin.cache import cache_root

#: A fresh process: turn the cache on, compile one program (slow enough to be written), report the
#: folder and JAX's cache-hit events.
SCRIPT = """
import json, jax, jax.numpy as jnp
hits = []
jax.monitoring.register_event_listener(lambda event, **kw: hits.append(event) if "cache_hits" in event else None)
from iterlin.compilation import enable_compilation_cache
path = enable_compilation_cache()
@jax.jit
def f(x):
    for i in range(60):
        x = jnp.tanh(x @ x.T + i) @ x
    return x
f(jnp.ones((64, 64))).block_until_ready()
print(json.dumps({"path": None if path is None else str(path), "hits": len(hits)}))
"""


def _run(env_value, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env["JAX_PLATFORMS"] = "cpu"
    env["ITERLIN_COMPILATION_CACHE"] = env_value
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_folder_default_override_and_off(monkeypatch, tmp_path):
    monkeypatch.delenv(compilation.ENV_VAR, raising=False)
    assert compilation.compilation_cache_dir() == cache_root() / "jax"
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
