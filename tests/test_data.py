"""Tests for iterlin.data: verified CIFAR-10 reading, safe unpickling, subsets, the quintic.

Never touches the network: tiny batch files in the official format are written under tmp_path,
as directories and as .tar.gz archives whose md5 is injected; downloads use file:// URLs.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import pickletools
import re
import struct
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest

import iterlin.data.cifar10 as data
from iterlin.data import (
    CIFAR10_DIRNAME,
    CIFAR10_MEAN,
    CIFAR10_STD,
    CIFAR10_URL,
    ENV_VAR,
    QUINTIC_HALF_WIDTH,
    DataError,
    Dataset,
    DatasetNotFoundError,
    FileRecord,
    download_archive,
    extract_archive,
    find_cifar10,
    load_cifar10,
    quintic,
    quintic_fn,
    check_heldout,
    heldout_images,
    heldout_pool,
    load_heldout,
    read_batches,
    read_cifar10,
    safe_unpickle,
    train_index,
)

TRAIN = [f"data_batch_{i}" for i in range(1, 6)]
ALL = [*TRAIN, "test_batch"]


# ------------------------------------------------------------------------------------------
# Helpers: tiny copies in the official format
# ------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    """Tests see no ITERLIN_CIFAR10 unless they set it."""
    monkeypatch.delenv(ENV_VAR, raising=False)


def make_batches(n: int, seed: int = 0) -> dict[str, dict]:
    """Six official-format batch dicts with n random images each (distinct across files)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in ALL:
        out[name] = {
            b"batch_label": f"{name} of 6".encode(),
            b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
            b"labels": [int(v) for v in rng.integers(0, 10, size=n)],
            b"filenames": [f"{name}_{k}.png".encode() for k in range(n)],
        }
    return out


def prefix(batches: dict[str, dict], k: int) -> dict[str, dict]:
    """The first k images of every file, as a subset copy would be made."""
    return {
        name: {
            b"batch_label": b[b"batch_label"],
            b"data": b[b"data"][:k].copy(),
            b"labels": b[b"labels"][:k],
            b"filenames": b[b"filenames"][:k],
        }
        for name, b in batches.items()
    }


def write_dir(root: Path, batches: dict[str, dict], protocol: int = 4) -> Path:
    """root/cifar-10-batches-py/<files>; returns the batch directory."""
    d = root / CIFAR10_DIRNAME
    d.mkdir(parents=True)
    for name, batch in batches.items():
        (d / name).write_bytes(pickle.dumps(batch, protocol=protocol))
    (d / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"x"] * 10}, protocol=2))
    return d


def write_archive(path: Path, batch_dir: Path, extra: list[tarfile.TarInfo] = ()) -> str:
    """A .tar.gz of batch_dir as cifar-10-batches-py/ (plus raw extra members); returns md5."""
    with tarfile.open(path, "w:gz") as tf:
        tf.add(batch_dir, arcname=CIFAR10_DIRNAME)
        for info in extra:
            tf.addfile(info, io.BytesIO(b"x" * info.size) if info.isreg() else None)
    return hashlib.md5(path.read_bytes()).hexdigest()


def py2_pickle(data_arr: np.ndarray, labels: list[int]) -> bytes:
    """A batch pickled as Python 2's cPickle (protocol 2) wrote the official files.

    Python 2 ``str`` becomes SHORT_BINSTRING/BINSTRING (read back as bytes with
    encoding="bytes") and the array refers to ``numpy.core.multiarray._reconstruct``.
    """

    def s(b: bytes) -> bytes:
        return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<I", len(b)) + b

    def k(v: int) -> bytes:
        return b"K" + bytes([v]) if v < 256 else b"M" + struct.pack("<H", v)

    n = data_arr.shape[0]
    arr = (
        b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n"
        + k(0) + b"\x85" + s(b"b") + b"\x87R"
        + b"(" + k(1) + k(n) + k(3072) + b"\x86"
        + b"cnumpy\ndtype\n" + s(b"u1") + k(0) + k(1) + b"\x87R"
        + b"(" + k(3) + s(b"|") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xff" + k(0) + b"tb"
        + b"\x89" + s(data_arr.tobytes()) + b"tb"
    )  # fmt: skip
    lab = b"](" + b"".join(k(v) for v in labels) + b"e"
    return (
        b"\x80\x02}("
        + s(b"batch_label")
        + s(b"py2")
        + s(b"data")
        + arr
        + s(b"labels")
        + lab
        + b"u."
    )


def listing(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


# ------------------------------------------------------------------------------------------
# Reading the official layout
# ------------------------------------------------------------------------------------------


def test_reads_official_layout_as_nhwc(tmp_path):
    batches = make_batches(4, seed=1)
    d = write_dir(tmp_path, batches)
    ds = read_cifar10(d)
    assert ds.x_train.shape == (20, 32, 32, 3) and ds.x_train.dtype == np.uint8
    assert ds.y_train.shape == (20,) and ds.y_train.dtype == np.int32
    assert ds.x_test.shape == (4, 32, 32, 3) and ds.y_test.shape == (4,)
    # Channel-major rows: value of (row r, col c, channel ch) is at ch*1024 + r*32 + c.
    raw = batches["data_batch_2"][b"data"]
    k, r, c = 3, 5, 17
    for ch in range(3):
        assert ds.x_train[4 + k, r, c, ch] == raw[k, ch * 1024 + r * 32 + c]
    np.testing.assert_array_equal(ds.x_train[4:8], raw.reshape(4, 3, 32, 32).transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(ds.y_train, sum((batches[n][b"labels"] for n in TRAIN), []))
    np.testing.assert_array_equal(ds.y_test, batches["test_batch"][b"labels"])
    # Accepted equally: the directory holding cifar-10-batches-py/ and the batch directory.
    assert find_cifar10(tmp_path) == d and find_cifar10(d) == d


def test_python2_official_pickle_format_is_read():
    rng = np.random.default_rng(2)
    arr = rng.integers(0, 256, size=(3, 3072), dtype=np.uint8)
    raw = py2_pickle(arr, [7, 0, 9])
    globals_used = [a for op, a, _ in pickletools.genops(raw) if op.name == "GLOBAL"]
    assert globals_used == ["numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype"]
    batch = safe_unpickle(raw, name="py2")
    assert set(batch) == {b"batch_label", b"data", b"labels"}
    np.testing.assert_array_equal(batch[b"data"], arr)
    assert batch[b"data"].dtype == np.uint8 and batch[b"labels"] == [7, 0, 9]


def test_archive_is_read_in_memory_and_matches_directory(tmp_path):
    d = write_dir(tmp_path / "src", make_batches(3, seed=3))
    archive = tmp_path / "cifar-10-python.tar.gz"
    md5 = write_archive(archive, d)
    before = listing(tmp_path)
    from_dir, from_archive = read_cifar10(d), read_cifar10(archive, archive_md5=md5)
    assert from_dir.fingerprint == from_archive.fingerprint
    assert listing(tmp_path) == before  # nothing was extracted next to it (nor anywhere under tmp_path)
    assert not (tmp_path / CIFAR10_DIRNAME).exists()


def test_load_cifar10_standardises(tmp_path):
    batches = make_batches(2, seed=4)
    d = write_dir(tmp_path, batches)
    ds = load_cifar10(3, 1, root=d)
    raw = read_cifar10(d, 3, 1)
    assert ds.x_train.dtype == np.float32 and ds.x_train.shape == (3, 32, 32, 3)
    expected = (raw.x_train.astype(np.float64) / 255 - CIFAR10_MEAN) / CIFAR10_STD
    np.testing.assert_allclose(ds.x_train, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ds.y_train, raw.y_train)
    assert ds.x_test.shape == (1, 32, 32, 3) and ds.y_test.dtype == np.int32


# ------------------------------------------------------------------------------------------
# Verification: checksums, truncation, wrong format, unsafe archives
# ------------------------------------------------------------------------------------------


def test_archive_md5_mismatch_rejected_and_nothing_extracted(tmp_path):
    d = write_dir(tmp_path / "src", make_batches(2))
    archive = tmp_path / "a.tar.gz"
    actual = write_archive(archive, d)
    wrong = "0" * 32
    dest = tmp_path / "dest"
    with pytest.raises(DataError) as e:
        extract_archive(archive, dest, expected_md5=wrong)
    msg = str(e.value)
    assert str(archive) in msg and wrong in msg and actual in msg
    assert listing(dest) == []
    with pytest.raises(DataError, match=actual):
        read_cifar10(archive, archive_md5=wrong)
    # The official md5 is the default: a non-official archive is refused.
    with pytest.raises(DataError, match=data.CIFAR10_MD5):
        read_cifar10(archive)
    # With the right md5 it extracts completely, with no temporary left-overs.
    out = extract_archive(archive, dest, expected_md5=actual)
    assert out == dest / CIFAR10_DIRNAME
    assert listing(dest) == sorted(
        [CIFAR10_DIRNAME, *(f"{CIFAR10_DIRNAME}/{n}" for n in [*ALL, "batches.meta"])]
    )
    assert read_cifar10(out).fingerprint == read_cifar10(d).fingerprint


def test_truncated_archive_rejected(tmp_path):
    d = write_dir(tmp_path / "src", make_batches(3))
    full = tmp_path / "full.tar.gz"
    write_archive(full, d)
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size * 2 // 3])
    cut_md5 = hashlib.md5(cut.read_bytes()).hexdigest()
    dest = tmp_path / "dest"
    # Even with its own md5 injected (so the checksum passes), the format check catches it.
    with pytest.raises(DataError, match="truncated|not a readable"):
        extract_archive(cut, dest, expected_md5=cut_md5)
    assert listing(dest) == []
    with pytest.raises(DataError, match="truncated|not a readable"):
        read_cifar10(cut, archive_md5=cut_md5)


@pytest.mark.parametrize(
    "member",
    [
        "../evil",
        "/tmp/iterlin_abs_evil",
        f"{CIFAR10_DIRNAME}/../evil",
        f"{CIFAR10_DIRNAME}/sub/evil",
        "other/evil",
        "symlink",
    ],
)
def test_unsafe_archive_members_rejected(tmp_path, member):
    d = write_dir(tmp_path / "src", make_batches(1))
    if member == "symlink":
        info = tarfile.TarInfo(f"{CIFAR10_DIRNAME}/link")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
    else:
        info = tarfile.TarInfo(member)
        info.size = 3
    archive = tmp_path / "a.tar.gz"
    md5 = write_archive(archive, d, extra=[info])
    dest = tmp_path / "dest"
    with pytest.raises(DataError, match="unsafe or unexpected member"):
        extract_archive(archive, dest, expected_md5=md5)
    assert listing(dest) == []
    assert not (tmp_path / "evil").exists() and not Path("/tmp/iterlin_abs_evil").exists()
    with pytest.raises(DataError, match="unsafe or unexpected member"):
        read_cifar10(archive, archive_md5=md5)


def _bad(kind: str, batch: dict) -> bytes:
    b = dict(batch)
    if kind == "garbage":
        return b"this is not a pickle at all"
    if kind == "truncated":
        return pickle.dumps(b, protocol=4)[:-100]
    if kind == "not_a_dict":
        return pickle.dumps([b[b"data"]], protocol=4)
    if kind == "str_keys":
        return pickle.dumps({"data": b[b"data"], "labels": b[b"labels"]}, protocol=4)
    if kind == "float_data":
        b[b"data"] = b[b"data"].astype(np.float32)
    elif kind == "wrong_width":
        b[b"data"] = b[b"data"][:, :1024]
    elif kind == "label_out_of_range":
        b[b"labels"] = [10] + b[b"labels"][1:]
    elif kind == "label_count":
        b[b"labels"] = b[b"labels"][:-1]
    elif kind == "label_float":
        b[b"labels"] = [float(v) for v in b[b"labels"]]
    elif kind == "protocol5":  # needs numpy._core.numeric._frombuffer: not allowed
        return pickle.dumps(b, protocol=5)
    return pickle.dumps(b, protocol=4)


@pytest.mark.parametrize(
    "kind",
    [
        "garbage", "truncated", "not_a_dict", "str_keys", "float_data", "wrong_width",
        "label_out_of_range", "label_count", "label_float", "protocol5",
    ],
)  # fmt: skip
def test_wrong_format_file_rejected(tmp_path, kind):
    batches = make_batches(3)
    d = write_dir(tmp_path, batches)
    (d / "data_batch_3").write_bytes(_bad(kind, batches["data_batch_3"]))
    with pytest.raises(DataError, match="data_batch_3"):
        read_cifar10(d)


def test_missing_batch_file_named(tmp_path):
    d = write_dir(tmp_path, make_batches(2))
    (d / "data_batch_4").unlink()
    with pytest.raises(DataError, match="data_batch_4"):
        read_cifar10(d)


def test_oversized_batch_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    # The issue: a 3 GiB data_batch_1 (a valid pickle plus padding) was read whole. Like archive
    # members, batch files are capped (64 MiB; lowered here), checked before reading.
    d = write_dir(tmp_path, make_batches(2))
    size = (d / "test_batch").stat().st_size
    monkeypatch.setattr(data, "_MAX_MEMBER_BYTES", size + 100)
    assert read_cifar10(d).x_test.shape[0] == 2  # under the cap: read as before
    padded = (d / "data_batch_1").read_bytes() + b"\0" * 200  # still a valid pickle (padding after STOP)
    assert pickle.loads(padded)[b"labels"]
    (d / "data_batch_1").write_bytes(padded)
    reads = []
    real_open = open

    def spy_open(path, *args, **kwargs):
        f = real_open(path, *args, **kwargs)
        if str(path).endswith("data_batch_1"):
            reads.append(path)
        return f

    monkeypatch.setattr("builtins.open", spy_open)
    with pytest.raises(DataError, match=rf"data_batch_1: batch file is {len(padded)} bytes, over the "
                                        rf"{size + 100} byte limit"):
        read_cifar10(d)
    assert reads == [], "refused by its size, before any read"


def test_a_batch_file_that_grows_past_the_cap_while_read_is_refused(tmp_path, monkeypatch):
    d = write_dir(tmp_path, make_batches(2))
    limit = (d / "test_batch").stat().st_size + 10
    monkeypatch.setattr(data, "_MAX_MEMBER_BYTES", limit)
    real_stat = Path.stat

    def small_stat(self, *args, **kwargs):  # the size seen before reading is under the cap ...
        st = real_stat(self, *args, **kwargs)
        return os.stat_result((*st[:6], min(st.st_size, 1), *st[7:])) if self.name == "data_batch_2" else st

    (d / "data_batch_2").write_bytes((d / "data_batch_2").read_bytes() + b"\0" * 100)  # ... the bytes are not
    monkeypatch.setattr(Path, "stat", small_stat)
    with pytest.raises(DataError, match=rf"data_batch_2: batch file is more than {limit} bytes"):
        read_cifar10(d)


def test_official_size_file_must_have_official_md5(tmp_path):
    batches = make_batches(2)
    d = write_dir(tmp_path, batches)
    sizes = {n: (d / n).stat().st_size for n in ALL}
    good = {n: FileRecord(sizes[n], data.md5sum(d / n)) for n in ALL}
    assert read_cifar10(d, files=good).x_train.shape == (10, 32, 32, 3)
    bad = dict(good, data_batch_2=FileRecord(sizes["data_batch_2"], "f" * 32))
    with pytest.raises(DataError, match=f"data_batch_2.*{'f' * 32}"):
        read_cifar10(d, files=bad)
    # A file of another size (a re-pickled subset) only gets the structural check.
    other = dict(good, data_batch_2=FileRecord(sizes["data_batch_2"] + 1, "f" * 32))
    assert read_cifar10(d, files=other).x_train.shape == (10, 32, 32, 3)


# ------------------------------------------------------------------------------------------
# Safety: a crafted pickle must not execute anything
# ------------------------------------------------------------------------------------------


class _Evil:
    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


class _EvilEval:
    def __init__(self, code):
        self.code = code

    def __reduce__(self):
        return (eval, (self.code,))


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_malicious_pickle_rejected_without_executing(tmp_path, protocol):
    marker = tmp_path / "pwned"
    payloads = {
        "system": pickle.dumps(_Evil(f"touch {marker}"), protocol=protocol),
        "eval": pickle.dumps(
            _EvilEval(f"open({str(marker)!r}, 'w').write('x')"), protocol=protocol
        ),
    }
    # The payloads really do name the dangerous callables.
    assert b"system" in payloads["system"] and b"eval" in payloads["eval"]
    for what, raw in payloads.items():
        with pytest.raises(DataError, match=f"forbidden global .*{what}") as e:
            safe_unpickle(raw, name="evil.pkl")
        assert "evil.pkl" in str(e.value)
        assert not marker.exists(), what
    # Also through the reader, as a batch file.
    d = write_dir(tmp_path / "copy", make_batches(1))
    (d / "data_batch_1").write_bytes(payloads["system"])
    with pytest.raises(DataError, match="forbidden global.*system"):
        read_cifar10(d)
    assert not marker.exists()


def test_restricted_unpickler_allows_only_numpy_reconstruction():
    u = data.RestrictedUnpickler(io.BytesIO(b"."))
    assert u.find_class("numpy", "ndarray") is np.ndarray
    assert u.find_class("numpy", "dtype") is np.dtype
    for module, name in [
        ("os", "system"), ("posix", "system"), ("builtins", "eval"), ("builtins", "getattr"),
        ("_codecs", "encode"), ("numpy", "load"), ("numpy._core.numeric", "_frombuffer"),
        ("subprocess", "Popen"),
    ]:  # fmt: skip
        with pytest.raises(pickle.UnpicklingError, match=f"{module}.{name}"):
            u.find_class(module, name)


# ------------------------------------------------------------------------------------------
# Finding the data; the missing-dataset message
# ------------------------------------------------------------------------------------------


def test_missing_dataset_message(tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(DatasetNotFoundError) as e:
        load_cifar10(10, 10, cache_dir=cache)
    msg = str(e.value)
    assert ENV_VAR in msg and CIFAR10_URL in msg and "download=True" in msg
    assert str(cache / CIFAR10_DIRNAME) in msg and str(cache / data.CIFAR10_ARCHIVE) in msg
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, ValueError)
    assert not cache.exists()  # looking creates nothing


def test_missing_dataset_message_for_env_and_root(tmp_path, monkeypatch):
    nowhere = tmp_path / "nowhere"
    monkeypatch.setenv(ENV_VAR, str(nowhere))
    with pytest.raises(DatasetNotFoundError) as e:
        find_cifar10(cache_dir=tmp_path / "cache")
    msg = str(e.value)
    assert f"{ENV_VAR}=" in msg and str(nowhere / CIFAR10_DIRNAME) in msg
    assert str(nowhere / data.CIFAR10_ARCHIVE) in msg and CIFAR10_URL in msg
    assert f"unset {ENV_VAR} and pass download=True" in msg
    with pytest.raises(DatasetNotFoundError, match="root=") as e:
        find_cifar10(tmp_path / "other")
    assert str(tmp_path / "other" / CIFAR10_DIRNAME) in str(e.value)


def test_resolution_order_root_env_cache(tmp_path, monkeypatch):
    a = write_dir(tmp_path / "a", make_batches(1, seed=10))
    b = write_dir(tmp_path / "b", make_batches(1, seed=11))
    cache = tmp_path / "cache"
    c = write_dir(cache, make_batches(1, seed=12))
    assert find_cifar10(cache_dir=cache) == c
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "b"))
    assert find_cifar10(cache_dir=cache) == b
    assert find_cifar10(tmp_path / "a", cache_dir=cache) == a
    # The environment variable may also name the batch directory or the archive (or its folder).
    monkeypatch.setenv(ENV_VAR, str(b))
    assert find_cifar10(cache_dir=cache) == b
    archive = tmp_path / "arc" / data.CIFAR10_ARCHIVE
    archive.parent.mkdir()
    md5 = write_archive(archive, a)
    monkeypatch.setenv(ENV_VAR, str(archive))
    assert find_cifar10(cache_dir=cache) == archive
    monkeypatch.setenv(ENV_VAR, str(archive.parent))
    assert find_cifar10(cache_dir=cache) == archive
    monkeypatch.setattr(data, "CIFAR10_MD5", md5)
    assert load_cifar10(cache_dir=cache).fingerprint == load_cifar10(root=a).fingerprint


def test_cached_archive_is_verified_then_extracted(tmp_path, monkeypatch):
    src = write_dir(tmp_path / "src", make_batches(2))
    cache = tmp_path / "cache"
    cache.mkdir()
    md5 = write_archive(cache / data.CIFAR10_ARCHIVE, src)
    with pytest.raises(DataError, match="md5 mismatch"):  # not the official archive
        find_cifar10(cache_dir=cache)
    assert not (cache / CIFAR10_DIRNAME).exists()
    monkeypatch.setattr(data, "CIFAR10_MD5", md5)
    assert find_cifar10(cache_dir=cache) == cache / CIFAR10_DIRNAME
    assert listing(cache) == sorted(
        [
            data.CIFAR10_ARCHIVE,
            CIFAR10_DIRNAME,
            *(f"{CIFAR10_DIRNAME}/{n}" for n in [*ALL, "batches.meta"]),
        ]
    )


# ------------------------------------------------------------------------------------------
# Downloads (file:// URLs, no network)
# ------------------------------------------------------------------------------------------


def test_download_verifies_and_moves_into_place(tmp_path):
    src = write_dir(tmp_path / "src", make_batches(1))
    archive = tmp_path / "served" / "cifar-10-python.tar.gz"
    archive.parent.mkdir()
    md5 = write_archive(archive, src)
    dest = tmp_path / "dest"
    out = download_archive(
        archive.as_uri(), dest, expected_md5=md5, expected_size=archive.stat().st_size
    )
    assert out == dest / "cifar-10-python.tar.gz"
    assert out.read_bytes() == archive.read_bytes()
    assert listing(dest) == ["cifar-10-python.tar.gz"]  # no temporary left-over
    # A verified file already there is reused: the URL is not even opened.
    assert (
        download_archive(
            (tmp_path / "gone.tar.gz").as_uri(), dest, filename=out.name, expected_md5=md5
        )
        == out
    )


def test_download_md5_mismatch_leaves_nothing(tmp_path):
    src = write_dir(tmp_path / "src", make_batches(1))
    archive = tmp_path / "served.tar.gz"
    md5 = write_archive(archive, src)
    dest = tmp_path / "dest"
    with pytest.raises(DataError) as e:
        download_archive(archive.as_uri(), dest, filename="x.tar.gz", expected_md5="0" * 32)
    assert "0" * 32 in str(e.value) and md5 in str(e.value)
    assert listing(dest) == []
    with pytest.raises(DataError, match="expected 5"):
        download_archive(
            archive.as_uri(), dest, filename="x.tar.gz", expected_md5=md5, expected_size=5
        )
    assert listing(dest) == []
    with pytest.raises(DataError, match="could not download"):
        download_archive((tmp_path / "absent.tar.gz").as_uri(), dest, expected_md5=md5)
    assert listing(dest) == []


def test_load_with_download_true(tmp_path, monkeypatch):
    src = write_dir(tmp_path / "src", make_batches(2))
    archive = tmp_path / "served" / data.CIFAR10_ARCHIVE
    archive.parent.mkdir()
    md5 = write_archive(archive, src)
    monkeypatch.setattr(data, "CIFAR10_URL", archive.as_uri())
    monkeypatch.setattr(data, "CIFAR10_MD5", md5)
    monkeypatch.setattr(data, "CIFAR10_SIZE", archive.stat().st_size)
    cache = tmp_path / "cache"
    with pytest.raises(DatasetNotFoundError):  # download=None, and the suite sets ITERLIN_DOWNLOAD=0
        load_cifar10(cache_dir=cache)
    ds = load_cifar10(cache_dir=cache, download=True)
    assert ds.fingerprint == load_cifar10(root=src).fingerprint
    assert (cache / CIFAR10_DIRNAME / "test_batch").is_file()
    assert (cache / data.CIFAR10_ARCHIVE).read_bytes() == archive.read_bytes()


class _Server:
    """A local stand-in for the CIFAR-10 server (http://127.0.0.1:<port>/), counting requests."""

    def __init__(self, folder: Path):
        import functools
        import http.server
        import threading

        self.requests = []
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                outer.requests.append(self.path)

        self.httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/{data.CIFAR10_ARCHIVE}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A tiny archive served over HTTP as the official one (URL, md5 and size patched), the user
    cache folder in tmp_path (XDG_CACHE_HOME), downloads left to the default (ITERLIN_DOWNLOAD unset)."""
    src = write_dir(tmp_path / "src", make_batches(2))
    archive = tmp_path / "served" / data.CIFAR10_ARCHIVE
    archive.parent.mkdir()
    md5 = write_archive(archive, src)
    server = _Server(archive.parent)
    monkeypatch.setattr(data, "CIFAR10_URL", server.url)
    monkeypatch.setattr(data, "CIFAR10_MD5", md5)
    monkeypatch.setattr(data, "CIFAR10_SIZE", archive.stat().st_size)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(data.DOWNLOAD_ENV_VAR, raising=False)
    yield server, src, tmp_path / "xdg" / "iterlin"
    server.close()


def test_missing_data_is_downloaded_by_default_with_a_progress_bar(served, capsys):
    server, src, cache = served
    ds = load_cifar10()  # what a notebook run or `iterlin run` calls: download=None
    assert ds.fingerprint == load_cifar10(root=src).fingerprint
    assert server.requests == [f"/{data.CIFAR10_ARCHIVE}"]
    assert (cache / CIFAR10_DIRNAME / "test_batch").is_file()
    assert f"downloading {data.CIFAR10_ARCHIVE}" in capsys.readouterr().err
    load_cifar10()  # the second time from the user cache folder: no request
    assert len(server.requests) == 1


def test_an_experiment_load_downloads_through_the_same_route(served):
    from iterlin.experiments import get, resolve

    server, src, cache = served
    config = resolve("fig3", "smoke", n_train=10, n_test=2, batch_size=4, n_sharpness=8)
    ds = get("fig3").load(config)
    assert ds.x_train.shape[0] == 10 and len(server.requests) == 1


def test_iterlin_download_0_turns_it_off(served, monkeypatch):
    server, _, cache = served
    monkeypatch.setenv(data.DOWNLOAD_ENV_VAR, "0")
    with pytest.raises(DatasetNotFoundError, match="unset ITERLIN_DOWNLOAD or pass download=True") as e:
        load_cifar10()
    assert "ITERLIN_DOWNLOAD='0'" in str(e.value)
    assert server.requests == [] and not cache.exists()
    with pytest.raises(TypeError, match="download='yes' is not allowed"):
        load_cifar10(download="yes")


def test_offline_keeps_the_not_found_message(served):
    server, _, cache = served
    server.close()  # nothing listens there any more: as offline
    with pytest.raises(DatasetNotFoundError) as e:
        load_cifar10()
    msg = str(e.value)
    assert msg.startswith("CIFAR-10 not found (the download failed)") and ENV_VAR in msg
    assert f"{data.CIFAR10_URL} (download" in msg and "could not download" in msg
    assert not (cache / data.CIFAR10_ARCHIVE).exists()
    with pytest.raises(data.DataError, match="could not download"):  # asked for explicitly: the download's error
        load_cifar10(download=True)


# ------------------------------------------------------------------------------------------
# The subset rule
# ------------------------------------------------------------------------------------------


def test_subset_rule_same_images_from_full_and_truncated_copies(tmp_path):
    full_batches = make_batches(12, seed=5)
    full = write_dir(tmp_path / "full", full_batches)
    short = write_dir(tmp_path / "short", prefix(full_batches, 7), protocol=3)
    for n_train in range(0, 36):
        n_test = n_train % 8
        a, b = read_cifar10(full, n_train, n_test), read_cifar10(short, n_train, n_test)
        assert a.x_train.shape == (n_train, 32, 32, 3) and a.x_test.shape[0] == n_test
        assert a.fingerprint == b.fingerprint, n_train
    # The rule itself: n_train = 7 takes 2, 2, 1, 1, 1 images from data_batch_1..5.
    ds = read_cifar10(full, 7, 0)
    take = {
        "data_batch_1": 2,
        "data_batch_2": 2,
        "data_batch_3": 1,
        "data_batch_4": 1,
        "data_batch_5": 1,
    }
    expected = np.concatenate([full_batches[n][b"data"][:t] for n, t in take.items()])
    np.testing.assert_array_equal(ds.x_train, expected.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    # None means all images.
    assert read_cifar10(full).x_train.shape[0] == 60 and read_cifar10(short).x_test.shape[0] == 7


def test_n_train_and_n_test_too_large(tmp_path):
    d = write_dir(tmp_path, make_batches(7))
    with pytest.raises(ValueError, match=r"n_train=36 .*<= 35"):
        read_cifar10(d, 36)
    with pytest.raises(ValueError, match=r"n_test=8 .*<= 7"):
        load_cifar10(10, 8, root=d)
    assert read_cifar10(d, 35, 7).x_train.shape[0] == 35


@pytest.mark.parametrize("bad", [-1, 2.5, "10", True])
def test_bad_counts_rejected(tmp_path, bad):
    with pytest.raises(ValueError, match="n_train"):
        load_cifar10(bad, root=tmp_path)
    with pytest.raises(ValueError, match="n_test"):
        load_cifar10(None, bad, root=tmp_path)


def test_real_subset(cifar_subset_path):
    """The real subset beside the checkout (conftest skips, reported, only if it is absent)."""
    ds = load_cifar10(root=cifar_subset_path)
    assert ds.x_train.shape == (4660, 32, 32, 3) and ds.x_test.shape == (932, 32, 32, 3)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
    np.testing.assert_array_equal(
        np.bincount(ds.y_train, minlength=10), [479, 479, 444, 448, 489, 435, 464, 477, 481, 464]
    )
    np.testing.assert_array_equal(
        np.bincount(ds.y_test, minlength=10), [97, 78, 94, 95, 85, 84, 105, 96, 98, 100]
    )
    # The official statistics standardise real images to roughly zero mean, unit variance.
    np.testing.assert_allclose(ds.x_train.mean(axis=(0, 1, 2)), 0.0, atol=0.05)
    np.testing.assert_allclose(ds.x_train.std(axis=(0, 1, 2)), 1.0, atol=0.05)
    small = load_cifar10(12, 5, root=cifar_subset_path)
    np.testing.assert_array_equal(small.x_train[:3], ds.x_train[:3])  # 3 from data_batch_1
    np.testing.assert_array_equal(small.x_train[3], ds.x_train[932])  # then data_batch_2
    np.testing.assert_array_equal(small.x_test, ds.x_test[:5])


# ------------------------------------------------------------------------------------------
# The held-out pool: every installed image a run neither trained nor early-stopped on
# ------------------------------------------------------------------------------------------


def _uneven(seed: int = 6) -> dict[str, dict]:
    """Batches of 6 images, data_batch_2 cut to 3 (installed counts 6, 3, 6, 6, 6; 6 test images)."""
    batches = make_batches(6, seed=seed)
    batches["data_batch_2"] = prefix({"b": batches["data_batch_2"]}, 3)["b"]
    return batches


def _rows(x: np.ndarray) -> set[bytes]:
    return {im.tobytes() for im in x}


def test_heldout_pool_is_every_installed_image_not_trained_on(tmp_path):
    d = write_dir(tmp_path, _uneven())
    batches = read_batches(d)
    assert batches.counts == (6, 3, 6, 6, 6) and batches.test[0].shape == (6, 32, 32, 3)
    # n_train = 7 takes 2, 2, 1, 1, 1 images (the subset rule), recorded by official index
    np.testing.assert_array_equal(train_index(7, batches.counts), [0, 1, 10000, 10001, 20000, 30000, 40000])
    pool = heldout_pool(batches.counts, 6, train=train_index(7, batches.counts))
    np.testing.assert_array_equal(pool.test_index, np.arange(6))
    np.testing.assert_array_equal(pool.train_index, [2, 3, 4, 5, 10002, *range(20001, 20006), *range(30001, 30006),
                                                     *range(40001, 40006)])
    assert pool.size == 6 + 27 - 7 + 0 and pool.train_index.dtype == np.int64
    images = heldout_images(batches, pool)
    trained = read_cifar10(d, 7, 0)
    every = read_cifar10(d)
    # the unused images and the training images are disjoint and together every installed one
    assert not _rows(images.x_unused) & _rows(trained.x_train)
    assert _rows(images.x_unused) | _rows(trained.x_train) == _rows(every.x_train)
    assert images.x_unused.shape == (20, 32, 32, 3) and images.y_unused.dtype == np.int32
    np.testing.assert_array_equal(images.x_test, every.x_test)
    np.testing.assert_array_equal(images.y_test, every.y_test)
    # image k of data_batch_{f+1} is official index 10000 f + k, labels too
    at = list(pool.train_index).index(20003)
    raw = _uneven()["data_batch_3"]
    np.testing.assert_array_equal(images.x_unused[at], raw[b"data"][3].reshape(3, 32, 32).transpose(1, 2, 0))
    assert images.y_unused[at] == raw[b"labels"][3]
    # the standardised pool of load_heldout: the same images as load_cifar10 standardises them
    pool2, std = load_heldout(7, root=d)
    assert pool2.train_index.tolist() == pool.train_index.tolist()
    np.testing.assert_array_equal(std.x_test, load_cifar10(0, None, root=d).x_test)
    np.testing.assert_allclose(std.x_unused, data.standardise(images.x_unused))
    every_image, rest = load_heldout(None, root=d)  # trained on all: the test images only
    assert (every_image.test_index.size, every_image.train_index.size, rest.x_unused.shape) == (6, 0, (0, 32, 32, 3))


def test_heldout_indices_name_the_same_images_on_a_prefix_copy(tmp_path):
    full_batches = make_batches(9, seed=7)
    full, short = write_dir(tmp_path / "full", full_batches), write_dir(tmp_path / "short", prefix(full_batches, 5))
    pool = heldout_pool((5,) * 5, 5, train=train_index(10, (5,) * 5))
    assert pool.train_index.size == 25 - 10
    a, b = heldout_images(read_batches(short), pool), heldout_images(read_batches(full), pool)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    archive = tmp_path / "cifar-10-python.tar.gz"
    md5 = write_archive(archive, short)
    np.testing.assert_array_equal(heldout_images(read_batches(archive, archive_md5=md5), pool).x_unused, a.x_unused)
    # a pool of the full copy holds images the short copy does not have
    with pytest.raises(ValueError, match="pool is not allowed: its training-batch image 5 is not installed"):
        heldout_images(read_batches(short), heldout_pool((9,) * 5, 5, train=train_index(10, (9,) * 5)))


def test_heldout_pool_leaves_out_early_stopping_images_and_refuses_overlaps(tmp_path):
    counts = (6, 3, 6, 6, 6)
    used = train_index(7, counts)
    pool = heldout_pool(counts, 6, train=used, early_stop=[2, 3, 10002], early_stop_test=[0, 5])
    np.testing.assert_array_equal(pool.test_index, [1, 2, 3, 4])
    assert {2, 3, 10002}.isdisjoint(pool.train_index.tolist()) and pool.train_index.size == 20 - 3
    assert check_heldout(pool, train=used, early_stop=[2, 3, 10002], early_stop_test=[0, 5]) is pool
    # fig5's construction (the images after the largest training set in load_cifar10's order) is
    # refused: load_cifar10(n + v)'s first n images are not load_cifar10(n)'s
    with pytest.raises(ValueError, match=r"early_stop is not allowed: 3 image\(s\) \(e.g. 30001, 40000, 40001\) of it "
                                         "are in train"):
        heldout_pool(counts, 6, train=train_index(10, counts), early_stop=train_index(15, counts)[10:])
    # a recorded pool that holds a training or early-stopping image is refused, naming which
    everything = heldout_pool(counts, 6, train=[])
    assert everything.size == 27 + 6
    for kwargs, name in ((dict(train=used), "train"), (dict(train=[], early_stop=[40002]), "early_stop"),
                         (dict(train=[], early_stop_test=[3]), "early_stop_test")):
        with pytest.raises(ValueError, match=f"pool is not allowed: 1 image|pool is not allowed: 7 image.* in {name};"):
            check_heldout(everything, **kwargs)
    with pytest.raises(TypeError, match="pool of type tuple"):
        check_heldout((np.arange(3), np.arange(3)), train=[])


@pytest.mark.parametrize("kwargs, match", [
    (dict(early_stop=[50000]), r"early_stop holds 50000, which is not allowed: .*\[0, 50000\)"),
    (dict(early_stop=[-1]), "early_stop holds -1"),
    (dict(early_stop=[3, 3]), "early_stop is not allowed with repeated indices"),
    (dict(early_stop=[2.0]), "early_stop of dtype float64 is not allowed"),
    (dict(early_stop=[5, 10005]), r"early_stop is not allowed: 1 image\(s\) \(e.g. 10005\) of it are not installed"),
    (dict(early_stop_test=[6]), r"early_stop_test holds 6, .*\[0, 6\)"),
    (dict(train=[10004]), r"train is not allowed: 1 image\(s\) \(e.g. 10004\) of it are not installed"),
    (dict(train=[0, 1], n_test=-1), "n_test"),
    (dict(train=[0], counts=(6, 3, 6)), "counts=.* is not allowed: counts must be 5 numbers"),
    (dict(train=[0], counts=(6, 3, 6, 6, 10001)), "counts=.* is not allowed"),
])
def test_heldout_pool_bad_input(kwargs, match):
    kwargs = {"counts": (6, 3, 6, 6, 6), "n_test": 6, "train": train_index(7, (6, 3, 6, 6, 6)), **kwargs}
    with pytest.raises(ValueError, match=match):
        heldout_pool(kwargs.pop("counts"), kwargs.pop("n_test"), **kwargs)
    with pytest.raises(ValueError, match=r"n_train=28 is not allowed: this copy holds 6/3/6/6/6"):
        train_index(28, (6, 3, 6, 6, 6))


def test_real_subset_heldout_pool(cifar_subset_path):
    """A 1,000-image run on the repository's subset: 932 test images and 3,660 unused ones."""
    pool, images = load_heldout(1000, root=cifar_subset_path)
    assert (pool.test_index.size, pool.train_index.size, pool.size) == (932, 3660, 4592)
    source = find_cifar10(cifar_subset_path)
    trained = read_cifar10(source, 1000, 0)
    raw = heldout_images(read_batches(source), pool)
    assert not _rows(raw.x_unused) & _rows(trained.x_train)
    assert images.x_unused.dtype == np.float32 and images.x_unused.shape == (3660, 32, 32, 3)


# ------------------------------------------------------------------------------------------
# Dataset fingerprint
# ------------------------------------------------------------------------------------------


def test_fingerprint_detects_any_change():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(4, 3)).astype(np.float32), np.arange(4, dtype=np.int32)
    ds = Dataset(x, y, x[:2], y[:2])
    assert ds.fingerprint == Dataset(x.copy(), y.copy(), x[:2].copy(), y[:2].copy()).fingerprint
    assert len(ds.fingerprint) == 64
    x2 = x.copy()
    x2.view(np.uint32)[1, 2] ^= 1  # one bit
    variants = [
        Dataset(x2, y, x[:2], y[:2]),
        Dataset(x, y.astype(np.int64), x[:2], y[:2]),  # dtype
        Dataset(x.reshape(3, 4), y, x[:2], y[:2]),  # shape
        Dataset(x[:2], y[:2], x, y),  # fields swapped
    ]
    fps = {v.fingerprint for v in variants}
    assert len(fps) == len(variants) and ds.fingerprint not in fps


# ------------------------------------------------------------------------------------------
# The quintic (Fig. 9)
# ------------------------------------------------------------------------------------------


def test_quintic_points_and_values():
    ds = quintic()
    a = QUINTIC_HALF_WIDTH
    assert ds.x_train.shape == ds.y_train.shape == (20, 1)
    assert ds.x_test.shape == ds.y_test.shape == (1000, 1)
    assert all(v.dtype == np.float32 for v in ds)
    np.testing.assert_array_equal(ds.x_train[:, 0], np.linspace(-a, a, 20).astype(np.float32))
    np.testing.assert_array_equal(ds.x_test[[0, -1], 0], [-a, a])
    assert np.allclose(np.diff(ds.x_train[:, 0]), 2 * a / 19, rtol=1e-5)
    np.testing.assert_allclose(
        quintic_fn(np.array([0.0, 2.0, -2.0, 1.0])), [-1.0, 0.0, -2.0, 1 / 32 + 0.5]
    )
    np.testing.assert_allclose(
        ds.y_test, quintic_fn(ds.x_test.astype(np.float64)), rtol=1e-6, atol=1e-6
    )
    ds64 = quintic(5, 7, x_range=(-1.0, 2.0), dtype=np.float64)
    assert ds64.x_test.dtype == np.float64 and ds64.x_test[-1, 0] == 2.0


def test_quintic_range_is_the_widest_within_the_papers_bound():
    a = QUINTIC_HALF_WIDTH
    x = np.linspace(-a, a, 200001)
    y = quintic_fn(x)
    assert y.min() >= -4.0 and y.max() <= 4.0  # outputs lie in [-4, 4] (paper, App. on Fig. 9)
    assert y.min() < -3.99  # and the range uses (almost) all of it ...
    assert quintic_fn(-(a + 0.001)) < -4.0  # ... a wider symmetric range would leave it
    ds = quintic(20, 1000)
    assert np.abs(ds.y_train).max() <= 4.0 and np.abs(ds.y_test).max() <= 4.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_train": 0}, "n_train"),
        ({"n_test": -3}, "n_test"),
        ({"x_range": (1.0, -1.0)}, "x_range"),
        ({"x_range": (0.0, float("inf"))}, "x_range"),
        ({"x_range": "ab"}, "x_range"),
        ({"dtype": np.int32}, "dtype"),
    ],
)
def test_quintic_bad_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        quintic(**kwargs)


def test_a_cached_archive_with_the_wrong_md5_is_named_when_the_download_fails(served):
    """An official-size archive in the cache whose md5 is wrong, downloads allowed, no network: the
    message names the md5 mismatch, not only "the download failed"."""
    server, _, cache = served
    server.close()
    cache.mkdir(parents=True)
    (cache / data.CIFAR10_ARCHIVE).write_bytes(b"\0" * data.CIFAR10_SIZE)
    with pytest.raises(DatasetNotFoundError) as e:
        load_cifar10()
    msg = str(e.value)
    assert "md5 mismatch" in msg and str(cache / data.CIFAR10_ARCHIVE) in msg and data.CIFAR10_MD5 in msg, msg


def test_a_cached_archive_with_the_wrong_md5_is_named_with_downloads_off(served, monkeypatch):
    """The same archive with ``ITERLIN_DOWNLOAD=0``: the md5 mismatch and the file are named too."""
    server, _, cache = served
    monkeypatch.setenv(data.DOWNLOAD_ENV_VAR, "0")
    cache.mkdir(parents=True)
    (cache / data.CIFAR10_ARCHIVE).write_bytes(b"\0" * data.CIFAR10_SIZE)
    with pytest.raises(data.DataError) as e:
        load_cifar10()
    msg = str(e.value)
    assert "md5 mismatch" in msg and str(cache / data.CIFAR10_ARCHIVE) in msg and server.requests == [], msg


def test_xdg_cache_home_a_file_is_named_before_downloading(served, monkeypatch, tmp_path, capsys):
    """``$XDG_CACHE_HOME`` a file, ``ITERLIN_CIFAR10`` unset, downloads allowed: a clear error naming
    the variable (exit 2 on the command line), not a NotADirectoryError traceback."""
    from iterlin import cli

    server, _, _ = served
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(a_file))
    monkeypatch.delenv(ENV_VAR, raising=False)
    with pytest.raises(data.DataError, match=rf"XDG_CACHE_HOME='{re.escape(str(a_file))}' is not allowed: the "
                                             r"CIFAR-10 cache folder .* cannot be created there \(NotADirectoryError"):
        load_cifar10()
    assert server.requests == []
    with pytest.raises(data.DataError, match=r"cache_dir='.*a-file/sub' is not allowed"):
        data.find_cifar10(cache_dir=a_file / "sub")
    assert cli.main(["run", "fig3", "-p", "steps=5", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "iterlin run: error: XDG_CACHE_HOME=" in err and "Traceback" not in err


def test_a_killed_downloads_part_file_is_cleaned_up(served):
    server, src, cache = served
    cache.mkdir(parents=True)
    old_part = cache / f".{data.CIFAR10_ARCHIVE}.abc123.part"
    old_dir = cache / f".{CIFAR10_DIRNAME}.def456.part"
    live_part = cache / f".{data.CIFAR10_ARCHIVE}.live.part"
    old_part.write_bytes(b"x" * 100)
    old_dir.mkdir()
    live_part.write_bytes(b"y")
    stale = time.time() - data.STALE_PART_SECONDS - 60
    os.utime(old_part, (stale, stale))
    os.utime(old_dir, (stale, stale))
    load_cifar10()
    assert not old_part.exists() and not old_dir.exists()
    assert live_part.exists()  # maybe another process's download in progress: left alone
