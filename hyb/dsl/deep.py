"""Room on the stack for deeply nested records.

hyb's stages recurse over the syntax tree and the records made from it: the tree builder, the
checker, the interpreter's code generator, the middle end's rewrites, the back ends and autodiff
each go down a few Python frames per level of nesting.  A flat chain of operators, ``a + b + c +
...``, is a left-deep tree as deep as it has terms, so a chain of a few hundred terms needs more
frames than Python's default recursion limit allows, and with a higher limit more C stack than a
thread's default stack holds (a frame that goes through C code, a ``repr`` or an ``==`` of
records, takes C stack).

:func:`call` runs a piece of work with room for records of a given depth (:func:`depth`): directly
where the thread it is on has room for them, else on a thread of its own whose stack holds
:data:`LIMIT` frames, the interpreter's recursion limit raised to what the work needs (at most
:data:`LIMIT`) for as long as such a thread runs and put back when the last one ends.  No limit set
is more than any of those threads' stacks hold, so none can run out of stack before Python stops it
with a :class:`RecursionError`; the parser refuses programs nearly as deep as :data:`MAX_DEPTH`
levels (``parser.MAX_LEVELS``).  CPython's recursion limit is one for every thread: while such a
thread runs, the program's other threads may recurse deeper than their usual limit before a
:class:`RecursionError` stops them (a plain Python call takes no C stack in CPython 3.11, a call
through C code does).  Work on an ordinary thread never counts on more than half of Python's
default limit, whatever the limit is meanwhile.
"""
from __future__ import annotations

import contextvars
import functools
import sys
import threading
import weakref

from . import ast as syntax

# Python frames a stage spends per level of a record's nesting, at most (measured over every stage
# on chains of operators, with a margin), and what it spends at the top besides
FRAMES_PER_LEVEL = 8
BASE_FRAMES = 100
# The deepest records the stages get room for (the parser accepts programs somewhat shallower)
MAX_DEPTH = 60_000
# The recursion limit of the threads :func:`call` starts, and the C stack each one gets for it: a
# plain Python call takes none (CPython 3.11), a frame that recurses through C code a few hundred
# bytes (measured: about 230 per level of an `==` of records, 420 of generators in `yield from`,
# 740 of a `__getattr__` calling itself)
LIMIT = BASE_FRAMES + FRAMES_PER_LEVEL * MAX_DEPTH
STACK_PER_FRAME = 1024
STACK_BYTES = LIMIT * STACK_PER_FRAME
# The most frames work runs with on a thread it did not start: Python's default limit, for which
# every platform's default stack is large enough
ORDINARY_LIMIT = 1000


def frames(levels: int) -> int:
    """The Python frames the stages may take on records nested ``levels`` deep."""
    return BASE_FRAMES + FRAMES_PER_LEVEL * levels


# ------------------------------------------------------------------ depth
_MEMO: dict = {}  # id(root) -> (weak reference to it, its depth)


def depth(root) -> int:
    """The nesting of ``root``: the most records (dataclass instances) on a path down from it,
    through their fields and the lists, tuples and dicts in them.  Computed without recursion, and
    kept for a root that takes weak references (a syntax module, a kernel definition)."""
    key = id(root)
    known = _MEMO.get(key)
    if known is not None and known[0]() is root:
        return known[1]
    d = _depth(root)
    try:
        ref = weakref.ref(root, lambda _, key=key: _MEMO.pop(key, None))
    except TypeError:
        return d
    _MEMO[key] = (ref, d)
    return d


_KINDS: dict = {list: 2, tuple: 2, dict: 3}  # type -> 1: a record, 2: a sequence, 3: a dict, 0: other


def _kind(t) -> int:
    k = _KINDS.get(t)
    if k is None:
        k = _KINDS[t] = 1 if hasattr(t, "__dataclass_fields__") else \
            2 if issubclass(t, (list, tuple)) else 3 if issubclass(t, dict) else 0
    return k


# Syntax nodes whose list of operands the checker makes a left-deep chain of binary nodes (`a and
# b and c`, `a < b < c`, `max(a, b, c)`): each operand counts as deep as the chain
_CHAINS = {syntax.BoolOp: "values", syntax.Compare: "operands", syntax.Call: "args"}


def _depth(root) -> int:
    """Walked from the top, each record carrying the level it is met at; a record met again (records
    may share parts) is walked again only when met deeper than before."""
    if _kind(type(root)) != 1:
        return 0
    kinds, kind = _KINDS, _kind
    seen: dict = {}
    deepest = 0
    stack = [(root, 1)]
    while stack:
        node, level = stack.pop()
        if seen.get(id(node), 0) >= level:
            continue
        seen[id(node)] = level
        deepest = max(deepest, level)
        below = level + 1
        values = list(node.__dict__.values()) if hasattr(node, "__dict__") else \
            [getattr(node, f, None) for f in type(node).__dataclass_fields__]
        chained = _CHAINS.get(type(node))
        if chained is not None:  # n operands: the checker's chain of n - 1 binary nodes over them
            items = getattr(node, chained)
            stack.extend((v, below + len(items)) for v in items if kind(type(v)) == 1)
            values = [v for v in values if v is not items]
        while values:
            v = values.pop()
            k = kinds.get(type(v))
            if k is None:
                k = kind(type(v))
            if k == 1:
                stack.append((v, below))
            elif k == 2:
                values.extend(v)
            elif k == 3:
                values.extend(v.values())
    return deepest


# ------------------------------------------------------------------ room
_local = threading.local()  # .room: the frames the work of a thread call() started may take
_lock = threading.Lock()  # over the two lists below
_stack_lock = threading.Lock()  # over threading.stack_size, set while one of those threads starts
_needs: list = []  # the recursion limit each thread of call() now running needs
_limits = [0, 0]  # the recursion limit before the first of them, and the one they set last


def call(levels: int, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with room for records nested ``levels`` deep (:func:`depth`):
    on this thread when it has the room, else on a thread with the stack for it.  What ``fn``
    returns or raises is what this returns or raises."""
    need = frames(min(levels, MAX_DEPTH))
    room = getattr(_local, "room", None)
    if room is None:
        # an ordinary thread: half of the limit its stack was meant for (the other half is its
        # caller's), whatever limit a thread of call() has set meanwhile
        room = min(_limits[0] if _needs else sys.getrecursionlimit(), ORDINARY_LIMIT) // 2
    if need <= room:
        return fn(*args, **kwargs)
    return _on_deep_thread(need, fn, args, kwargs)


def method(levels_of):
    """A decorator: the method run by :func:`call` with room for ``levels_of(self)`` levels."""
    def wrap(fn):
        @functools.wraps(fn)
        def run(self, *args, **kwargs):
            return call(levels_of(self), fn, self, *args, **kwargs)
        return run
    return wrap


def _raise_limit(need: int):
    """The recursion limit raised to ``need`` at least (the limit before is kept, to put back)."""
    with _lock:
        if not _needs or sys.getrecursionlimit() != _limits[1]:
            _limits[0] = sys.getrecursionlimit()  # (the program's, or one it has set since)
        _needs.append(need)
        _set_limit(max([_limits[0], *_needs]))


def _restore_limit(need: int):
    """The limit lowered to what the threads still running need, or put back when none is left
    (unless the program has set one since)."""
    with _lock:
        _needs.remove(need)
        if sys.getrecursionlimit() == _limits[1]:
            _set_limit(max([_limits[0], *_needs]))


def _set_limit(limit: int):
    sys.setrecursionlimit(limit)
    _limits[1] = limit


def _on_deep_thread(need: int, fn, args, kwargs):
    """``fn(*args, **kwargs)`` on a thread with the stack for LIMIT frames, the recursion limit
    raised to ``need`` meanwhile, this one waiting."""
    outcome = []
    context = contextvars.copy_context()

    def work():
        _raise_limit(need)
        _local.room = need
        try:
            outcome.append((True, context.run(fn, *args, **kwargs)))
        except BaseException as e:  # noqa: BLE001 (raised again in the caller's thread)
            outcome.append((False, e))
        finally:
            _restore_limit(need)

    with _stack_lock:
        old = threading.stack_size()
        try:
            threading.stack_size(STACK_BYTES)
            t = threading.Thread(target=work, name="hyb-deep", daemon=True)
            t.start()
        except (RuntimeError, ValueError, MemoryError):
            t = None  # no thread of that size to be had: the work runs here, as deep as it can
        finally:
            threading.stack_size(old)
    if t is None:
        return fn(*args, **kwargs)
    t.join()
    ok, value = outcome.pop()
    if ok:
        return value
    try:
        raise value
    finally:
        del value
