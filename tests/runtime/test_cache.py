"""The disk cache: reused across processes, never trusted when damaged, skipped when unwritable."""
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import hyb
from hyb.runtime import cache

SRC = "def add(a, b):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(a.shape[0]):\n" \
      "        c[i] = a[i] + b[i] * 2\n    return c\n"

SCRIPT = textwrap.dedent('''
    import sys, time, numpy as np, hyb
    from hyb.runtime import cache
    cache.code_fingerprint = lambda: "fixed"  # hyb/ may be edited between the runs of one test
    k = hyb.compile_source({src!r}, "add.hyb").add
    x = np.arange(10.0)
    loaded = []
    real = cache.load
    cache.load = lambda key: (lambda e: (loaded.append(e is not None), e)[1])(real(key))
    assert np.array_equal(k(x, x), x * 3)
    print("hit" if loaded and loaded[0] else "miss")
''').format(src=SRC)


def run(cache_dir, env_extra=None):
    env = dict(os.environ, HYB_CACHE_DIR=str(cache_dir))
    env.update(env_extra or {})
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip(), r.stderr


def entries(d: Path):
    # (the parser's tables, which hyb keeps in the same folder, are no kernel's entry)
    return [p for p in d.rglob("*") if p.is_file() and not p.name.startswith(".tmp") and p.suffix != ".tables"]


def test_second_process_loads_from_disk(tmp_path):
    assert run(tmp_path)[0] == "miss"
    assert len(entries(tmp_path)) == 1
    assert run(tmp_path)[0] == "hit"


@pytest.fixture(scope="module")
def first_entry(tmp_path_factory):
    """A cache directory holding the one entry a first process wrote (copied by each test that damages it)."""
    d = tmp_path_factory.mktemp("first")
    run(d)
    (entry,) = entries(d)
    return d, entry.relative_to(d)


@pytest.mark.parametrize("damage", ["truncate", "garble", "empty", "other-format"])
def test_damaged_entry_is_rebuilt(tmp_path, first_entry, damage):
    d, relative = first_entry
    shutil.copytree(d, tmp_path, dirs_exist_ok=True)
    (entry,) = entries(tmp_path)
    assert entry == tmp_path / relative
    data = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "garble":
        entry.write_bytes(data[:200] + bytes(b ^ 0x5A for b in data[200:400]) + data[400:])
    elif damage == "empty":
        entry.write_bytes(b"")
    else:
        entry.write_bytes(b"hyb-cache-0\n" + data[12:])
    out, _ = run(tmp_path)
    assert out == "miss"  # not trusted: rebuilt, and the result is still right (checked in the script)
    assert run(tmp_path)[0] == "hit"  # and written again


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory_compiles_in_memory(tmp_path):
    tmp_path.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        assert run(tmp_path)[0] == "miss"
        assert entries(tmp_path) == []
    finally:
        tmp_path.chmod(stat.S_IRWXU)


def test_unwritable_cache_path_compiles_in_memory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out, err = run(blocker / "cache")
    assert out == "miss" and "Traceback" not in err


def test_cache_can_be_turned_off(tmp_path):
    assert run(tmp_path, {"HYB_CACHE": "0"})[0] == "miss"
    assert entries(tmp_path) == []


def test_key_depends_on_source_signature_and_options():
    m1 = hyb.compile_source(SRC)
    m2 = hyb.compile_source(SRC.replace("* 2", "* 3"))
    spec = [hyb.dsl.check.arg_spec(np.ones(3))] * 2
    spec2 = [hyb.dsl.check.arg_spec(np.ones(4))] * 2
    k = cache.key("add", m1.module, spec, {"fastmath": False})
    assert k == cache.key("add", m1.module, spec, {"fastmath": False})
    assert k != cache.key("add", m2.module, spec, {"fastmath": False})
    assert k != cache.key("add", m1.module, spec2, {"fastmath": False})
    assert k != cache.key("add", m1.module, spec, {"fastmath": True})
    assert k == cache.key("add", m1.module, spec, {"fastmath": False, "threads": 7})


def test_warnings_are_repeated_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HYB_CACHE_DIR", str(tmp_path))
    src = "def sq(x):\n    y = output_tensor(x.shape, x.dtype)\n    for i in range(x.shape[0]):\n" \
          "        y[i] = y[i] * y[i]\n    return y\n"
    for _ in range(2):
        k = hyb.compile_source(src, "sq.hyb").sq
        with pytest.warns(hyb.HybridWarning, match="`y` is read before anything writes it"):
            k(np.ones(3))
    assert len(entries(tmp_path)) == 1


def test_every_field_of_the_code_record_is_stored_or_said_not_to_be():
    from dataclasses import fields

    from hyb.runtime.pipeline import NativeCode
    names = {f.name for f in fields(NativeCode)}
    assert names == set(cache._CODECS) | set(cache.NOT_STORED)
    assert not set(cache._CODECS) & set(cache.NOT_STORED)
