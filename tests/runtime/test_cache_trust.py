"""The disk cache holds native code that runs in the user's process, so hyb uses only folders and
entries that are the user's own and that nobody else can write.  Each refusal warns once, compiles
the kernel in memory (NumPy's answer) and leaves a planted entry unloaded: the entry planted here
holds the code of another kernel (``b * 5`` for ``b * 2``), which a trusted cache would run."""
import os
import stat
import warnings
from pathlib import Path

import numpy as np
import pytest

import hyb
from hyb.runtime import cache

SRC = "def add(a, b):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(a.shape[0]):\n" \
      "        c[i] = a[i] + b[i] * 2\n    return c\n"
X = np.arange(10.0)
RIGHT, PLANTED = X + X * 2, X + X * 5
OTHER_UID = os.geteuid() + 4242


def entries(d: Path):
    """The kernels' entries in cache folder ``d`` (each in the folder named by its key's first two
    characters; other files there are not the kernels')."""
    return [p for p in d.glob("??/*") if (p.is_file() or p.is_symlink()) and not p.name.startswith(".tmp")]


def call(src=SRC):
    """A new kernel of ``src`` (its first call looks in the disk cache), called on X, X."""
    return hyb.compile_source(src, "add.hyb").add(X, X)


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """No path refused by an earlier test, and ``loads``: what each disk-cache lookup found."""
    monkeypatch.setattr(cache, "_warned", set())
    found = []
    real = cache.load

    def load(key):
        entry = real(key)
        found.append(entry is not None)
        return entry
    monkeypatch.setattr(cache, "load", load)
    return found


@pytest.fixture(scope="module")
def plant(tmp_path_factory):
    """The place of SRC's entry in a cache folder, and the bytes of an entry of the same name and
    signature whose code computes ``a + b * 5``."""
    saved = os.environ.get("HYB_CACHE_DIR")
    made = {}
    try:
        for name, src in (("good", SRC), ("bad", SRC.replace("* 2", "* 5"))):
            d = tmp_path_factory.mktemp(name)
            os.environ["HYB_CACHE_DIR"] = str(d)
            call(src)
            (made[name],) = [(p.relative_to(d), p.read_bytes()) for p in entries(d)]
    finally:
        os.environ["HYB_CACHE_DIR"] = saved
    return made["good"][0], made["bad"][1]


@pytest.fixture
def planted(tmp_path, plant, monkeypatch):
    """HYB_CACHE_DIR: a folder of the user's (0700) whose entry for SRC is the planted one (0600)."""
    relative, data = plant
    d = tmp_path / "cache"
    entry = d / relative
    entry.parent.mkdir(mode=0o700, parents=True)
    d.chmod(0o700)
    entry.parent.chmod(0o700)
    entry.write_bytes(data)
    entry.chmod(0o600)
    monkeypatch.setenv("HYB_CACHE_DIR", str(d))
    return entry


def refused(src=SRC):
    """The result of a new kernel's first call and the disk-cache warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = call(src)
    return got, [str(w.message) for w in caught
                 if issubclass(w.category, hyb.HybridWarning) and "disk cache" in str(w.message)]


def test_a_trusted_planted_entry_is_loaded(planted, fresh):
    """The control: in a folder of the user's own the planted entry is what runs."""
    np.testing.assert_array_equal(call(), PLANTED)
    assert fresh == [True]


def test_folder_owned_by_another_user(planted, fresh, monkeypatch):
    d = planted.parent.parent
    monkeypatch.setattr(cache, "user", lambda: OTHER_UID)
    got, said = refused()
    np.testing.assert_array_equal(got, RIGHT)
    assert fresh == [False]
    assert said == [(f"warning: hyb's disk cache folder {d} is owned by uid {os.geteuid()}, not by you "
                    f"(uid {OTHER_UID}): whoever can write there could run code in this process, so hyb neither "
                    f"loads nor stores compiled code there; kernels are compiled in memory\n"
                    f"hint: point HYB_CACHE_DIR at a folder of your own")]
    assert entries(d) == [planted]  # nothing written beside it


@pytest.mark.parametrize("mode, writers", [(0o770, "its group"), (0o707, "all users"),
                                           (0o777, "its group and all users"), (0o1777, "its group and all users")])
def test_folder_others_can_write(planted, fresh, mode, writers):
    d = planted.parent.parent
    d.chmod(mode)
    got, said = refused()
    np.testing.assert_array_equal(got, RIGHT)
    assert fresh == [False]
    assert len(said) == 1
    assert said[0].startswith(f"warning: hyb's disk cache folder {d} can be written by {writers} (mode {mode:04o}): ")
    assert said[0].endswith(f"\nhint: chmod go-w {d}, or point HYB_CACHE_DIR at a folder of your own")
    assert entries(d) == [planted]
    assert cache.directory() is None  # nor do the operator builds (aot, extensions) use it


def test_the_warning_is_given_once_per_path(planted, fresh):
    planted.parent.parent.chmod(0o777)
    first, said = refused()
    again, said_again = refused(SRC.replace("* 2", "* 2.0"))
    np.testing.assert_array_equal(first, RIGHT)
    np.testing.assert_array_equal(again, RIGHT)
    assert len(said) == 1 and said_again == []
    assert fresh == [False, False]


def test_entry_folder_others_can_write(planted, fresh, plant):
    sub = planted.parent
    sub.chmod(0o775)
    got, said = refused()
    np.testing.assert_array_equal(got, RIGHT)
    assert fresh == [False]
    assert said == [(f"warning: hyb's disk cache folder {sub} can be written by its group (mode 0775): whoever can "
                    f"write there could run code in this process, so hyb neither loads nor stores compiled code "
                    f"there; kernels are compiled in memory\n"
                    f"hint: chmod go-w {sub}, or point HYB_CACHE_DIR at a folder of your own")]
    assert entries(sub.parent) == [planted] and planted.read_bytes() == plant[1]  # not written over


def test_entry_folder_that_is_a_link(planted, fresh, tmp_path):
    sub = planted.parent
    elsewhere = tmp_path / "elsewhere"
    sub.rename(elsewhere)
    sub.symlink_to(elsewhere)
    got, said = refused()
    np.testing.assert_array_equal(got, RIGHT)
    assert fresh == [False]
    assert said == [(f"warning: hyb's disk cache folder {sub} is a symbolic link: whoever can write there could run "
                    f"code in this process, so hyb neither loads nor stores compiled code there; kernels are "
                    f"compiled in memory\nhint: remove the link ({sub}), or point HYB_CACHE_DIR at a folder of "
                    f"your own")]
    assert sub.is_symlink()


def test_entry_others_can_write(planted, fresh):
    planted.chmod(0o666)
    got, said = refused()
    np.testing.assert_array_equal(got, RIGHT)
    assert fresh == [False]
    assert said == [(f"warning: hyb's disk cache entry {planted} can be written by its group and all users "
                    f"(mode 0666): hyb did not load it and compiles the kernel again\n"
                    f"hint: chmod go-w {planted}, or point HYB_CACHE_DIR at a folder of your own")]
    # the kernel compiled in its place is written over it, the user's own: the next kernel loads it
    assert stat.S_IMODE(planted.stat().st_mode) == 0o600
    np.testing.assert_array_equal(call(), RIGHT)
    assert fresh == [False, True]


def test_entry_that_is_a_link(planted, fresh, tmp_path):
    target = tmp_path / "planted-entry"
    planted.rename(target)
    planted.symlink_to(target)
    got, said = refused()
    np.testing.assert_array_equal(got, RIGHT)
    assert fresh == [False]
    assert said == [(f"warning: hyb's disk cache entry {planted} is a symbolic link: hyb did not load it and compiles "
                    f"the kernel again\nhint: remove the link ({planted}), or point HYB_CACHE_DIR at a folder of "
                    f"your own")]
    assert not planted.is_symlink() and target.exists()  # the link was replaced, its target left alone


class _FilesOfAnotherUser:
    """``os`` as the cache module sees it, where every regular file belongs to another user (tests
    cannot chown)."""

    def __getattr__(self, name):
        return getattr(os, name)

    @staticmethod
    def fstat(fd):
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return st
        values = list(st)
        values[4] = OTHER_UID  # st_uid
        return os.stat_result(values)


def test_entry_owned_by_another_user(planted, fresh, monkeypatch):
    monkeypatch.setattr(cache, "os", _FilesOfAnotherUser())
    got, said = refused()
    np.testing.assert_array_equal(got, RIGHT)
    assert fresh == [False]
    assert said == [(f"warning: hyb's disk cache entry {planted} is owned by uid {OTHER_UID}, not by you "
                    f"(uid {os.geteuid()}): hyb did not load it and compiles the kernel again\n"
                    f"hint: point HYB_CACHE_DIR at a folder of your own")]


@pytest.mark.parametrize("umask", [0o022, 0o277])
def test_made_folders_are_0700_and_entries_0600_and_hit(tmp_path, fresh, monkeypatch, umask):
    """Whatever the umask (0o277 takes the owner's write bit), the folders hyb makes (the cache
    folder, one missing above it, an entry's folder) are 0700 and its entries 0600; the second kernel
    loads the first one's entry."""
    d = tmp_path / "new" / "cache"
    hyb.compile_source(SRC)  # (the parser is made before: its tables are not the kernels' entries)
    monkeypatch.setenv("HYB_CACHE_DIR", str(d))
    old = os.umask(umask)
    try:
        np.testing.assert_array_equal(call(), RIGHT)
    finally:
        os.umask(old)
    (entry,) = entries(d)
    for folder in (d.parent, d, entry.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    np.testing.assert_array_equal(call(), RIGHT)
    assert fresh == [False, True]


def test_a_shared_sticky_parent_is_fine(tmp_path, fresh, monkeypatch):
    """A cache folder of the user's own inside a folder like /tmp (everyone writes, sticky bit)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv("HYB_CACHE_DIR", str(shared / "cache"))
    for _ in range(2):
        got, said = refused()
        np.testing.assert_array_equal(got, RIGHT)
        assert said == []
    assert fresh == [False, True]


def test_directory_makes_the_folder_0700_or_refuses_it(tmp_path, monkeypatch):
    d = tmp_path / "made"
    monkeypatch.setenv("HYB_CACHE_DIR", str(d))
    assert cache.directory() == str(d)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    d.chmod(0o757)
    with pytest.warns(hyb.HybridWarning, match=r"disk cache folder .* can be written by all users \(mode 0757\)"):
        assert cache.directory() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.directory() is None  # refused again, without a second warning
