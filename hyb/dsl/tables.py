"""The parser's LALR tables kept on disk, so that a process does not build them again.

Building the tables from the grammar takes most of the first parse in a process; lark can save a
built parser and load it back (a pickle).  The file lives in hyb's cache folder (``HYB_CACHE_DIR``,
else ``$XDG_CACHE_HOME/hyb`` or ``~/.cache/hyb``; none with ``HYB_CACHE=0``), named by a hash of
everything the tables depend on: the grammar, the parser's options, lark's and Python's versions.

A pickle runs code when it loads, so whoever could write the file could run code in the process:
a file is loaded only from a folder that belongs to the user (the effective uid) and that neither
its group nor others can write, and only if it is a regular file of the same kind (not a link).
A folder that cannot be made or written, or is not the user's alone, means building the tables in
memory, silently; a file that does not load is built again and replaced.  Files are written whole
and renamed into place, so a process never reads one half written.
"""
from __future__ import annotations

import hashlib
import os
import stat
import sys
import tempfile

import lark
from lark import Lark

from ..cachedir import configured, make_private

_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def path(grammar: str, options: dict) -> str | None:
    """The file of the tables of ``grammar`` built with lark's ``options`` (None: no cache)."""
    d = configured()
    if d is None:
        return None
    key = repr((grammar, sorted(options.items()), lark.__version__, sys.version_info[:2]))
    return os.path.join(d, f"lark-{hashlib.sha256(key.encode()).hexdigest()[:24]}.tables")


def trusted(st: os.stat_result) -> bool:
    """Whether a folder or file of status ``st`` is the user's and no one else can write it."""
    own = not hasattr(os, "geteuid") or st.st_uid == os.geteuid()
    return own and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def load(file: str) -> Lark | None:
    """The parser saved at ``file``; None when there is none, when it or its folder is not the
    user's alone, or when it does not load."""
    try:
        d = os.open(os.path.dirname(file), _DIR)
    except OSError:
        return None
    try:
        if not trusted(os.fstat(d)):
            return None
        with os.fdopen(os.open(os.path.basename(file), os.O_RDONLY | _NOFOLLOW, dir_fd=d), "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or not trusted(st):
                return None
            return Lark.load(f)
    except Exception:  # noqa: BLE001 (missing, unreadable, truncated, of another lark: built again)
        return None
    finally:
        os.close(d)


def store(parser: Lark, file: str) -> None:
    """Save ``parser`` at ``file`` for the next process; nothing when its folder cannot be made or
    written, or is not the user's alone."""
    d = os.path.dirname(file)
    try:
        make_private(d)
        if not trusted(os.stat(d)):
            return
        fd, temp = tempfile.mkstemp(prefix=".tmp-lark-", dir=d)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            parser.save(f)
        os.replace(temp, file)
    except Exception:  # noqa: BLE001 (a full disk, a parser that does not pickle: kept in memory only)
        try:
            os.unlink(temp)
        except OSError:
            pass
