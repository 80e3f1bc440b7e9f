"""hyb's cache folder: where the environment puts it, and folders made private in it.

The disk cache of compiled kernels (``runtime.cache``) and the parser's saved tables
(``dsl.tables``) share the folder: ``HYB_CACHE_DIR``, else ``$XDG_CACHE_HOME/hyb`` or
``~/.cache/hyb``; none with ``HYB_CACHE=0``.  Both hold code the process runs when it loads it,
so every folder hyb makes there, and above it, is the user's alone (mode 0700 whatever the
umask); each of them checks what it finds before it uses it.
"""
from __future__ import annotations

import os

_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def configured() -> str | None:
    """The cache folder the environment names (None: the cache is turned off), checked or not."""
    if os.environ.get("HYB_CACHE", "1").lower() in ("0", "no", "off", "false"):
        return None
    d = os.environ.get("HYB_CACHE_DIR")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "hyb")


def mkdir_private(name: str, dir_fd: int | None = None) -> None:
    """Make the folder ``name`` with mode 0700 whatever the umask (nothing where it exists)."""
    try:
        os.mkdir(name, 0o700, dir_fd=dir_fd)
    except FileExistsError:
        return
    fd = os.open(name, _DIR | _NOFOLLOW, dir_fd=dir_fd)
    try:
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def make_private(path: str) -> None:
    """Make the folder ``path`` and those missing above it, each with mode 0700 (raises OSError)."""
    missing = []
    p = os.path.abspath(path)
    while not os.path.lexists(p):
        missing.append(p)
        p = os.path.dirname(p)
    for p in reversed(missing):
        mkdir_private(p)
