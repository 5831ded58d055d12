"""Result cache: keys, atomic files, corrupt files detected and recomputed; and the claims table."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from iterlin.repro import cache as cache_mod
from iterlin.repro.cache import (
    CacheWarning,
    cache_key,
    cache_paths,
    cached,
    canonical_json,
    package_digest,
    default_cache_dir,
    load_results,
    save_results,
)
from iterlin.checkpoint import CheckpointError
from iterlin.repro.claims import NA, Claim, claims_table, fmt_K, publish_claims, verdict
from iterlin.repro.stats import num, pct

CONFIG = {"experiment": "figX", "K": [1, math.inf], "lr": 0.1, "n_train": None}


class Counter:
    """A compute function that counts its calls and records its checkpoint folder."""

    def __init__(self, value=1.5):
        self.calls, self.value, self.dirs = 0, value, []

    def __call__(self, ckpt):
        self.calls += 1
        self.dirs.append(ckpt)
        assert ckpt.is_dir()
        return {"acc": np.array([0.1, self.value]), "nested": {"K": np.array([1.0, np.inf]), "n": 3}, "ok": True}


# ----------------------------------------------------------------------------------------------
# Keys
# ----------------------------------------------------------------------------------------------


def test_canonical_json_is_order_free_and_writes_infinity():
    a = canonical_json({"b": 1, "a": [1, math.inf]})
    assert a == canonical_json({"a": (1, math.inf), "b": np.int64(1)}) == '{"a":[1,Infinity],"b":1}'
    with pytest.raises(ValueError, match="nan"):
        canonical_json({"lr": math.nan})
    with pytest.raises(TypeError, match="object"):
        canonical_json({"f": object()})


def test_key_changes_with_name_config_code_and_data_only():
    k = cache_key("fig3", CONFIG, data_fingerprint="d1", code="c1")
    assert k == cache_key("fig3", dict(reversed(list(CONFIG.items()))), data_fingerprint="d1", code="c1")
    assert k != cache_key("fig2", CONFIG, data_fingerprint="d1", code="c1")
    assert k != cache_key("fig3", {**CONFIG, "lr": 0.2}, data_fingerprint="d1", code="c1")
    assert k != cache_key("fig3", {**CONFIG, "K": [1, 10]}, data_fingerprint="d1", code="c1")
    assert k != cache_key("fig3", CONFIG, data_fingerprint="d2", code="c1")
    assert k != cache_key("fig3", CONFIG, data_fingerprint="d1", code="c2")
    # the default code fingerprint is that of the installed package
    assert cache_key("fig3", CONFIG, data_fingerprint="d1") == cache_key(
        "fig3", CONFIG, data_fingerprint="d1", code=package_digest()
    )


def test_code_fingerprint_follows_every_py_file(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    (tmp_path / "notes.txt").write_text("ignored")
    h = package_digest(tmp_path)
    (tmp_path / "notes.txt").write_text("changed")
    assert package_digest(tmp_path) == h
    (tmp_path / "b.py").write_text("y = 3\n")
    assert package_digest(tmp_path) != h


def test_code_fingerprint_sees_subpackages(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "fig3.py").write_text("K = 1\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "stale.py").write_text("ignored")
    h = package_digest(tmp_path)
    (tmp_path / "__pycache__" / "stale.py").write_text("still ignored")
    assert package_digest(tmp_path) == h
    (tmp_path / "experiments" / "fig3.py").write_text("K = 2\n")
    h2 = package_digest(tmp_path)
    assert h2 != h
    # a module moved into a subpackage is a different file: a new key
    (tmp_path / "experiments" / "fig3.py").rename(tmp_path / "fig3.py")
    assert package_digest(tmp_path) not in (h, h2)
    (tmp_path / "experiments" / "deeper").mkdir()
    (tmp_path / "experiments" / "deeper" / "x.py").write_text("")
    assert package_digest(tmp_path) not in (h, h2)


def test_cached_uses_the_callers_code_fingerprint(tmp_path, monkeypatch):
    f = Counter()
    cached("figX", f, CONFIG, data_fingerprint="d", code="fig-code-1", cache_dir=tmp_path, verbose=False)
    # the package-wide fingerprint plays no part once the caller gives one
    monkeypatch.setattr(cache_mod, "package_digest", lambda package_dir=None: "edited elsewhere")
    cached("figX", f, CONFIG, data_fingerprint="d", code="fig-code-1", cache_dir=tmp_path, verbose=False)
    assert f.calls == 1
    key = cache_key("figX", CONFIG, data_fingerprint="d", code="fig-code-1")
    side = json.loads(cache_paths("figX", key, tmp_path)["sidecar"].read_text())
    assert side["code_fingerprint"] == "fig-code-1" and side["key"] == key
    cached("figX", f, CONFIG, data_fingerprint="d", code="fig-code-2", cache_dir=tmp_path, verbose=False)
    assert f.calls == 2
    # with no code given, the default (package-wide) fingerprint is used and recorded
    cached("figX", f, CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    assert f.calls == 3
    key = cache_key("figX", CONFIG, data_fingerprint="d", code="edited elsewhere")
    assert json.loads(cache_paths("figX", key, tmp_path)["sidecar"].read_text())["code_fingerprint"] == "edited elsewhere"
    with pytest.raises(TypeError, match="code=3"):
        cache_key("figX", CONFIG, data_fingerprint="d", code=3)


def test_code_change_invalidates_cached_results(tmp_path, monkeypatch):
    f = Counter()
    cached("figX", f, CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    monkeypatch.setattr(cache_mod, "package_digest", lambda package_dir=None: "edited code")
    cached("figX", f, CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    assert f.calls == 2


def test_bad_name_and_fingerprint():
    with pytest.raises(ValueError, match="name='../x'"):
        cache_key("../x", CONFIG, data_fingerprint="d")
    with pytest.raises(TypeError, match="data_fingerprint=None"):
        cache_key("fig3", CONFIG, data_fingerprint=None)


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("ITERLIN_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("ITERLIN_CACHE")
    assert default_cache_dir().parts[-2:] == (".cache", "results")


def test_default_cache_dir_outside_a_checkout_is_the_users(monkeypatch, tmp_path):
    """Installed from a wheel there is no checkout: results go to $XDG_CACHE_HOME/iterlin (else
    ~/.cache/iterlin), never beside the package in site-packages."""
    import iterlin.repro.cache as cache_module

    monkeypatch.delenv("ITERLIN_CACHE", raising=False)
    monkeypatch.setattr(cache_module, "repo_root", lambda: None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "iterlin" / "results"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "iterlin" / "results"


# ----------------------------------------------------------------------------------------------
# cached()
# ----------------------------------------------------------------------------------------------


def test_second_call_loads_without_computing(tmp_path, capsys):
    f = Counter()
    r1 = cached("figX", f, CONFIG, data_fingerprint="d", cache_dir=tmp_path)
    r2 = cached("figX", f, CONFIG, data_fingerprint="d", cache_dir=tmp_path)
    assert f.calls == 1
    out = capsys.readouterr().out
    assert "computed and cached" in out and "loaded cached results" in out
    for r in (r1, r2):  # identical structure and values whether computed or loaded
        assert np.array_equal(r["acc"], [0.1, 1.5])
        assert np.array_equal(r["nested"]["K"], [1.0, np.inf]) and int(r["nested"]["n"]) == 3
        assert bool(r["ok"]) is True
    # the checkpoint folder is removed once results are stored; the sidecar describes them
    assert not f.dirs[0].exists()
    key = cache_key("figX", CONFIG, data_fingerprint="d")
    side = json.loads(cache_paths("figX", key, tmp_path)["sidecar"].read_text())
    assert side["key"] == key and side["config"]["K"] == [1, math.inf] and side["data_fingerprint"] == "d"


def test_other_config_recomputes(tmp_path):
    f = Counter()
    cached("figX", f, CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    cached("figX", f, {**CONFIG, "lr": 0.5}, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    cached("figX", f, CONFIG, data_fingerprint="other data", cache_dir=tmp_path, verbose=False)
    assert f.calls == 3


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "wrong_key"])
def test_corrupt_cache_file_is_reported_and_recomputed(tmp_path, damage):
    f = Counter()
    cached("figX", f, CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    path = cache_paths("figX", cache_key("figX", CONFIG, data_fingerprint="d"), tmp_path)["results"]
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00garbage" * 50)
    elif damage == "empty":
        path.write_bytes(b"")
    else:  # a valid file holding another key (e.g. copied over by hand)
        save_results(path, {"acc": np.zeros(2)}, key="0" * 64, config={})
    f.value = 2.5
    with pytest.warns(CacheWarning, match=str(path.name)):
        r = cached("figX", f, CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    assert f.calls == 2 and np.array_equal(r["acc"], [0.1, 2.5])  # recomputed, not the damaged data
    assert np.array_equal(load_results(path)["acc"], [0.1, 2.5])  # and re-stored


def test_corrupt_checkpoint_restarts_the_computation_once(tmp_path):
    calls = []

    def compute(ckpt):
        calls.append(ckpt)
        if len(calls) == 1:
            (ckpt / "run.npz").write_bytes(b"junk")
            raise CheckpointError(f"checkpoint {ckpt / 'run.npz'} is unreadable or truncated")
        assert not (ckpt / "run.npz").exists()  # the bad checkpoint was deleted
        return {"x": np.ones(1)}

    with pytest.warns(CacheWarning, match="run.npz"):
        r = cached("figX", compute, CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    assert len(calls) == 2 and r["x"][0] == 1.0


def test_failed_compute_leaves_no_results_file(tmp_path):
    def boom(ckpt):
        raise RuntimeError("diverged host")

    with pytest.raises(RuntimeError):
        cached("figX", boom, CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    assert not list(tmp_path.glob("*.npz")) and not list(tmp_path.glob("*.tmp"))


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    path = tmp_path / "r.npz"
    save_results(path, {"a": np.arange(3)}, key="k1", config={})

    def failing_savez(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez_compressed", failing_savez)
    with pytest.raises(OSError, match="disk full"):
        save_results(path, {"a": np.arange(5)}, key="k2", config={})
    assert sorted(os.listdir(tmp_path)) == ["r.npz"]  # no temporary file left behind
    assert np.array_equal(load_results(path, key="k1")["a"], np.arange(3))  # old file intact


def test_results_refuse_objects_and_bad_keys(tmp_path):
    with pytest.raises(TypeError, match="results\\['f'\\]"):
        save_results(tmp_path / "r.npz", {"f": object()}, key="k", config={})
    with pytest.raises(ValueError, match="'a/b'"):
        save_results(tmp_path / "r.npz", {"a/b": 1}, key="k", config={})
    with pytest.raises(TypeError, match="must return a dict"):
        cached("figX", lambda c: [1, 2], CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)


# ----------------------------------------------------------------------------------------------
# A valid but altered results file (issue 10, item 6): the digest
# ----------------------------------------------------------------------------------------------


def _replace_arrays(path, change):
    """Rewrite the .npz at ``path`` with ``change(flat) -> flat`` applied, every other member kept."""
    with np.load(path, allow_pickle=False) as z:
        flat = {k: z[k] for k in z.files}
    np.savez_compressed(path, **change(flat))


@pytest.mark.parametrize("alteration", ["other-values", "other-dtype", "dropped-key", "added-key", "digest-removed"])
def test_altered_results_are_reported_and_recomputed(tmp_path, alteration):
    f = Counter()
    cached("figX", f, CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    path = cache_paths("figX", cache_key("figX", CONFIG, data_fingerprint="d"), tmp_path)["results"]
    change = {
        "other-values": lambda flat: {**flat, "acc": np.array([0.9, 0.9])},  # same key, shape and dtype
        "other-dtype": lambda flat: {**flat, "acc": flat["acc"].astype(np.float32)},
        "dropped-key": lambda flat: {k: v for k, v in flat.items() if k != "ok"},
        "added-key": lambda flat: {**flat, "extra": np.ones(1)},
        "digest-removed": lambda flat: {k: v for k, v in flat.items() if k != "__digest__"},
    }[alteration]
    _replace_arrays(path, change)
    with pytest.warns(CacheWarning, match=path.name) as record:
        r = cached("figX", f, CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    assert "digest" in str(record[0].message)
    assert f.calls == 2 and np.array_equal(r["acc"], [0.1, 1.5])  # recomputed, not the altered values
    assert np.array_equal(load_results(path)["acc"], [0.1, 1.5])


def test_digest_is_stored_in_the_file_and_the_sidecar(tmp_path):
    f = Counter()
    cached("figX", f, CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    paths = cache_paths("figX", cache_key("figX", CONFIG, data_fingerprint="d"), tmp_path)
    with np.load(paths["results"], allow_pickle=False) as z:
        flat = {k: z[k] for k in z.files}
    stored = str(flat.pop("__digest__"))
    assert stored == cache_mod.results_digest(flat) == json.loads(paths["sidecar"].read_text())["results_digest"]
    with pytest.raises(ValueError, match="__digest__"):  # reserved
        save_results(tmp_path / "r.npz", {"__digest__": 1}, key="k", config={})


# ----------------------------------------------------------------------------------------------
# File modes and a cache directory that cannot be written (issue 10, smaller defects)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_cache_files_respect_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        cached("figX", Counter(), CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    finally:
        os.umask(old)
    paths = cache_paths("figX", cache_key("figX", CONFIG, data_fingerprint="d"), tmp_path)
    for p in (paths["results"], paths["sidecar"]):
        assert p.stat().st_mode & 0o777 == mode, (p.name, oct(p.stat().st_mode & 0o777))


def test_undeletable_corrupt_file_is_reported_as_such(tmp_path, monkeypatch):
    # Running as root, chmod cannot make the directory read-only: make the delete itself fail.
    f = Counter()
    cached("figX", f, CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    path = cache_paths("figX", cache_key("figX", CONFIG, data_fingerprint="d"), tmp_path)["results"]
    path.write_bytes(b"junk")
    real_unlink = type(path).unlink

    def unlink(self, *args, **kwargs):
        if self.suffix in (".npz", ".json"):
            raise PermissionError(13, "Permission denied", str(self))
        return real_unlink(self, *args, **kwargs)

    monkeypatch.setattr(type(path), "unlink", unlink)
    with pytest.warns(CacheWarning) as record:
        r = cached("figX", f, CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    msg = str(record[0].message)
    assert f"could not delete {path}" in msg and "PermissionError" in msg and "deleting" not in msg, msg
    assert "recomputing" in msg
    assert f.calls == 2 and np.array_equal(r["acc"], [0.1, 1.5])


def test_results_that_cannot_be_stored_are_returned_uncached(tmp_path, monkeypatch, capsys):
    def read_only(path, write):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(cache_mod, "atomic_write_bytes", read_only)
    f = Counter()
    with pytest.warns(CacheWarning, match="could not store the results in .*figX-.*npz.*PermissionError.*uncached"):
        r = cached("figX", f, CONFIG, data_fingerprint="d", cache_dir=tmp_path)
    assert f.calls == 1 and np.array_equal(r["acc"], [0.1, 1.5])
    assert "computed (not cached)" in capsys.readouterr().out
    assert not list(tmp_path.glob("*.npz"))


def test_checkpoints_go_to_a_temporary_folder_when_the_cache_cannot_hold_them(tmp_path):
    (tmp_path / "checkpoints").write_bytes(b"a file where the checkpoint folder should be")
    f = Counter()
    with pytest.warns(CacheWarning, match="cannot write checkpoints to .*temporary folder"):
        r = cached("figX", f, CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    assert f.calls == 1 and np.array_equal(r["acc"], [0.1, 1.5])
    assert not f.dirs[0].is_relative_to(tmp_path) and not f.dirs[0].exists()  # used, then removed


def test_undeletable_corrupt_checkpoints_are_not_met_again(tmp_path, monkeypatch):
    calls = []

    def compute(ckpt):
        calls.append(ckpt)
        if (ckpt / "run.npz").exists():
            raise CheckpointError(f"checkpoint {ckpt / 'run.npz'} is unreadable or truncated")
        if len(calls) == 1:
            (ckpt / "run.npz").write_bytes(b"junk")
            raise CheckpointError(f"checkpoint {ckpt / 'run.npz'} is unreadable or truncated")
        return {"x": np.ones(1)}

    def rmtree(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(cache_mod.shutil, "rmtree", rmtree)
    with pytest.warns(CacheWarning, match="could not delete the checkpoints in .*temporary folder"):
        r = cached("figX", compute, CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    assert len(calls) == 2 and calls[1] != calls[0] and r["x"][0] == 1.0
    monkeypatch.undo()
    cache_mod._remove(calls[1])


def _overrides_permissions() -> bool:
    """Whether this process ignores a directory's permission bits (root with CAP_DAC_OVERRIDE)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            caps = next(line for line in f if line.startswith("CapEff:"))
    except (OSError, StopIteration):
        return True
    return bool(int(caps.split()[1], 16) & (1 << 1))  # bit 1: CAP_DAC_OVERRIDE


def test_read_only_cache_directory(tmp_path):
    """A read-only cache folder: warned about, the results computed anyway. Root ignores permission
    bits (CAP_DAC_OVERRIDE), and CI runs as root: there the test reruns itself in a subprocess
    whose capability bounding set lacks CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (``setpriv``), so
    that the folder is read-only to it too."""
    if _overrides_permissions():
        import shutil
        import subprocess
        import sys

        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.fail("running as root without setpriv (util-linux): the read-only folder cannot be tested")
        proc = subprocess.run(
            [setpriv, "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-m", "pytest", "-q", "-n", "0",
             "-p", "no:cacheprovider", f"{__file__}::test_read_only_cache_directory", "--basetemp",
             str(tmp_path / "child")], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
        return
    f = Counter()
    cached("figX", f, CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    path = cache_paths("figX", cache_key("figX", CONFIG, data_fingerprint="d"), tmp_path)["results"]
    path.write_bytes(b"junk")
    os.chmod(tmp_path, 0o555)
    try:
        with pytest.warns(CacheWarning) as record:
            r = cached("figX", f, CONFIG, data_fingerprint="d", cache_dir=tmp_path, verbose=False)
    finally:
        os.chmod(tmp_path, 0o755)
    messages = [str(w.message) for w in record]
    assert any(f"could not delete {path}" in m for m in messages), messages
    assert any("could not store the results" in m for m in messages), messages
    assert f.calls == 2 and np.array_equal(r["acc"], [0.1, 1.5])


def test_load_results_refuses_foreign_npz(tmp_path):
    np.savez(tmp_path / "plain.npz", a=np.ones(2))
    with pytest.raises(CheckpointError, match="no stored key"):
        load_results(tmp_path / "plain.npz")


# ----------------------------------------------------------------------------------------------
# Claims tables
# ----------------------------------------------------------------------------------------------


ROWS = [
    Claim("large K on par with K = 1", "82.3 % vs 81.4 %", "31.2 % vs 30.9 %", "yes", "|Δ| < 1 point"),
    Claim("K = 1 reaches 82.3 %", "82.3 %", "31.2 %", NA, "needs the paper's scale"),
]


def test_rounding_helpers():
    assert pct(0.41234) == "41.2 %" and pct(1.0) == "100.0 %" and pct(-0.00001) == "0.0 %"
    assert pct(float("nan")) == "nan"
    assert num(-0.0001) == "0.00" and num(1.23456, 3) == "1.235"
    assert fmt_K(1) == "1" and fmt_K(100) == "100" and fmt_K(5e6) == "5e6" and fmt_K(math.inf) == "∞"
    assert verdict(True) == "yes" and verdict(False) == "no" and verdict(True, applicable=False) == NA
    assert verdict(None) == NA


def test_claims_table_is_fixed_width():
    table = claims_table(ROWS)
    lines = table.split("\n")
    assert lines[0].split() [:2] == ["claim", "paper"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    assert len(lines) == 2 + len(ROWS)
    # every column starts at the same offset on every line
    start = lines[0].index("this run")
    assert lines[2][start:].startswith("31.2 % vs 30.9 %") and lines[3][start:].startswith("31.2 %")
    assert lines[0].index("holds") == lines[2].index("yes ") == lines[3].index(NA)
    assert table == claims_table(ROWS)  # deterministic


def test_claim_fields_checked():
    with pytest.raises(ValueError, match="holds='maybe'"):
        claims_table([Claim("c", "p", "m", "maybe")])
    with pytest.raises(TypeError, match="measured=0.3"):
        claims_table([Claim("c", "p", 0.3, "yes")])
    with pytest.raises(ValueError, match="no newlines"):
        claims_table([Claim("c\nd", "p", "m", "yes")])


def test_publish_claims(tmp_path):
    text = publish_claims("fig3", ROWS, scale="smoke", directory=tmp_path)
    text = str(text)
    assert text.startswith("Claims of fig3 at scale 'smoke':\n") and text.endswith(claims_table(ROWS))
    publish_claims("fig2", ROWS[:1], scale="gpu", directory=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig2.json", "fig3.json"]


def test_load_results_checks_array_sizes_before_allocating_and_the_stored_config(tmp_path):
    import io
    import zipfile

    path = tmp_path / "r.npz"
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (2**40,)})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("x.npy", buf.getvalue() + b"\0" * 8)
    with pytest.raises(CheckpointError, match="claims shape"):  # not a MemoryError
        load_results(path)
    save_results(path, {"x": np.arange(3)}, key="k", config={"seed": 2})
    assert load_results(path, key="k", config={"seed": 2})["x"].tolist() == [0, 1, 2]
    with pytest.raises(CheckpointError, match='holds the results of config {"seed":2}, expected {"seed":5}'):
        load_results(path, config={"seed": 5})
