"""Warm kernel calls through the dispatchers of hyb.runtime.fastcall: the C extension and the Python
one (``HYB_FASTCALL=0``) give the same results, the same in-place writes and the same errors, and
the C one handles the common call itself instead of handing it to the Python path."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import hyb
from hyb.runtime import fastcall

SRC = '''
def add(a, b):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]
    return c

def axpy(y, a, x):
    for i in range(y.shape[0]):
        y[i] = y[i] + a * x[i]
    return y

def two(a, b):
    for i in range(a.shape[0]):
        a[i] = a[i] + 1
        b[i] = b[i] + 10
    return a, b

def stats(a):
    s = output_tensor((), a.dtype)
    m = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        s[()] += a[i]
        m[i] = a[i] * 2
    return s, m

def ramp(n, v):
    c = output_tensor((n,), "float64")
    for i in range(n):
        c[i] = v * i
    return c

def pick(a, k):
    c = output_tensor((1,), a.dtype)
    c[0] = a[k]
    return c

def shout(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        print("a", i, a[i])
        c[i] = a[i] + 1
    return c

def addk(x, s):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        y[i] = x[i] + s
    return y

def flag(x, on):
    y = output_tensor(x.shape, x.dtype)
    for i in range(x.shape[0]):
        if on:
            y[i] = x[i]
        else:
            y[i] = -x[i]
    return y
'''

# every test but the first needs the extension; the first fails without it
needs_native = pytest.mark.skipif(fastcall.native is None, reason="hyb was installed without its C extension")

DISPATCHERS = {"C": fastcall.native_call, "Python": fastcall.python_call}


@pytest.fixture(scope="module")
def mod():
    return hyb.compile_source(SRC, "fastcall.hyb")


@pytest.fixture
def native_entries(monkeypatch):
    """Tables hold the C extension's entries (the Python dispatcher runs them through `run`)."""
    monkeypatch.setattr(fastcall, "entry", fastcall.native_entry)


def unaligned(values):
    """A copy of `values` one byte past an aligned address."""
    raw = np.zeros(values.nbytes + 1, np.uint8)
    out = raw[1:].view(values.dtype)
    out[:] = values
    assert not out.flags.aligned
    return out


def copies(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def outcome(kernel, make_args, call, monkeypatch):
    """(result or exception, the array arguments afterwards) of a warm call with dispatcher `call`."""
    args = make_args()
    monkeypatch.setattr(fastcall, "call", fastcall.native_call)
    try:
        kernel(*copies(args))  # compiles the signature (or finds it), filling the table
    except hyb.HybridError:
        pass
    monkeypatch.setattr(fastcall, "call", call)
    try:
        got = kernel(*args)
    except Exception as e:  # noqa: BLE001 - the error is the outcome compared
        got = e
    return got, [a for a in args if isinstance(a, np.ndarray)]


def same(x, y):
    if isinstance(x, Exception) or isinstance(y, Exception):
        assert type(x) is type(y) and str(x) == str(y), (x, y)
    elif isinstance(x, tuple):
        assert isinstance(y, tuple) and len(x) == len(y)
        for a, b in zip(x, y):
            same(a, b)
    else:
        assert type(x) is type(y) and x.dtype == y.dtype and x.shape == y.shape, (x, y)
        np.testing.assert_array_equal(x, y)


def both(kernel, make_args, monkeypatch):
    """The outcome of the call with each dispatcher; asserts they agree and returns the C one's."""
    got = {name: outcome(kernel, make_args, call, monkeypatch) for name, call in DISPATCHERS.items()}
    (c, c_args), (p, p_args) = got["C"], got["Python"]
    same(c, p)
    for a, b in zip(c_args, p_args):
        same(a, b)
    return c, c_args


# ------------------------------------------------------------------ the extension and the switch

def test_the_c_extension_is_built_and_used():
    # CI installs hyb with `pip install -e .`: a build that silently failed would show here
    assert fastcall.native is not None
    assert fastcall.native.__name__ == "hyb.runtime._fastcall"
    if os.environ.get("HYB_FASTCALL", "1") != "0":
        assert fastcall.NATIVE and fastcall.call is fastcall.native_call and fastcall.entry is fastcall.native_entry


@needs_native
def test_hyb_fastcall_0_selects_the_python_dispatcher():
    code = ("from hyb.runtime import fastcall as f; "
            "print(f.NATIVE, f.call is f.python_call, f.entry is f.python_entry, f.MISS is f.native.MISS)")
    env = dict(os.environ, HYB_FASTCALL="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True", "True", "True"]


@needs_native
@pytest.mark.parametrize("values_of", [frozenset(), frozenset({1})])
def test_the_c_key_is_the_python_key(values_of):
    a = np.ones((2, 3), np.float32)
    calls = [(a, 1), (a, 2.5), (a, True), (a, np.float32(2)), (a.T, np.int8(3)), (np.float64(1), a[0]),
             (a.astype(">f4"), 3), (np.ones(()), 4), (), (a, [1, 2]), (a, None), (np.ma.ones(3), 1), (a, 1j),
             (a, np.str_("x"))]
    for args in calls:
        assert fastcall.native.key(args, values_of) == fastcall.fast_key(args, values_of), args


# ------------------------------------------------------------------ which path a call takes

def counting(kernel, args):
    """Replace the table entry of `args`' signature by one whose Python path counts its calls."""
    key = fastcall.fast_key(args, kernel._value_params)
    plan = kernel._fast[key].call_plan()
    seen = []

    def run(arrays):
        seen.append(1)
        return plan.run(arrays)

    kernel._plans[key] = fastcall.native_entry(dataclasses.replace(plan, run=run))
    return seen


@needs_native
@pytest.mark.parametrize("name, args, python", [
    ("add", lambda: (np.arange(5, dtype=np.float32), np.ones(5, np.float32)), False),
    ("axpy", lambda: (np.zeros(4), 2.0, np.arange(4.0)), False),
    ("stats", lambda: (np.arange(3.0),), False),
    ("addk", lambda: (np.arange(3, dtype=np.uint8), np.uint8(7)), False),
    ("addk", lambda: (np.arange(3.0), 5), False),
    ("flag", lambda: (np.arange(3.0), False), False),
    ("add", lambda: (np.arange(10.0)[::2], np.ones(5)), True),  # not contiguous: copied there
    ("add", lambda: (np.arange(5.0).astype(">f8"), np.ones(5)), True),  # byte-swapped
    ("add", lambda: (unaligned(np.arange(5.0)), np.ones(5)), True),
    ("addk", lambda: (np.arange(3.0), 2 ** 70), True),  # does not fit int64: the error comes from there
    ("shout", lambda: (np.arange(2.0),), True),  # prints
])
def test_the_c_dispatcher_hands_only_what_it_cannot_do_to_the_python_path(mod, native_entries, monkeypatch,
                                                                          name, args, python, capsys):
    kernel = getattr(mod, name)
    monkeypatch.setattr(fastcall, "call", fastcall.native_call)
    try:
        kernel(*args())
    except hyb.HybridError:
        pass
    seen = counting(kernel, args())
    for _ in range(3):
        try:
            kernel(*args())
        except hyb.HybridError:
            pass
    assert len(seen) == (3 if python else 0)


@needs_native
def test_an_input_overlapping_an_array_written_in_place_goes_to_the_python_path(mod, native_entries, monkeypatch):
    monkeypatch.setattr(fastcall, "call", fastcall.native_call)
    y = np.zeros(8)
    mod.axpy(y[:4], 1.0, y[4:])
    seen = counting(mod.axpy, (y[:4], 1.0, y[4:]))
    mod.axpy(y[:4], 1.0, y[4:])  # adjacent, not overlapping: the C path
    assert seen == []
    mod.axpy(y[:4], 1.0, y[2:6])  # overlapping: copied there
    assert seen == [1]


# ------------------------------------------------------------------ both dispatchers agree

@needs_native
def test_results_and_outputs(mod, native_entries, monkeypatch):
    c, _ = both(mod.add, lambda: (np.arange(4, dtype=np.float32), np.full(4, 0.5, np.float32)), monkeypatch)
    np.testing.assert_array_equal(c, np.arange(4) + 0.5)
    (s, m), _ = both(mod.stats, lambda: (np.arange(4.0),), monkeypatch)
    assert s.shape == () and s == 6.0
    np.testing.assert_array_equal(m, 2 * np.arange(4.0))


@needs_native
def test_in_place_writes(mod, native_entries, monkeypatch):
    y, (after, _) = both(mod.axpy, lambda: (np.ones(5), 2.0, np.arange(5.0)), monkeypatch)
    assert y is after  # the output is the argument written in place
    np.testing.assert_array_equal(after, 1 + 2 * np.arange(5.0))
    (a, b), (a0, b0) = both(mod.two, lambda: (np.zeros(3), np.zeros(3)), monkeypatch)
    assert a is a0 and b is b0
    np.testing.assert_array_equal(b, 10)


@needs_native
def test_read_only_array_written_in_place(mod, native_entries, monkeypatch):
    def args():
        y = np.ones(3)
        y.flags.writeable = False
        return y, 1.0, np.ones(3)
    e, (y, _) = both(mod.axpy, args, monkeypatch)
    assert isinstance(e, hyb.HybridArgumentError) and "written in place but is read-only" in str(e)
    np.testing.assert_array_equal(y, 1)


@needs_native
def test_two_arrays_written_in_place_sharing_memory(mod, native_entries, monkeypatch):
    def args():
        x = np.zeros(4)
        return x, x
    e, (x, _) = both(mod.two, args, monkeypatch)
    assert isinstance(e, hyb.HybridArgumentError) and "both written in place and share memory" in str(e)
    np.testing.assert_array_equal(x, 0)
    e, _ = both(mod.two, lambda: (lambda x: (x[:3], x[2:]))(np.zeros(5)), monkeypatch)
    assert isinstance(e, hyb.HybridArgumentError)


@needs_native
def test_an_input_overlapping_an_array_written_in_place(mod, native_entries, monkeypatch):
    def args():
        y = np.arange(6.0)
        return y[:4], 1.0, y[2:]
    out, (y, x) = both(mod.axpy, args, monkeypatch)
    np.testing.assert_array_equal(out, [2.0, 4.0, 6.0, 8.0])  # x read as it was before the call
    np.testing.assert_array_equal(x, [6.0, 8.0, 4.0, 5.0])  # (a view of y)


@needs_native
@pytest.mark.parametrize("make", [
    lambda: np.arange(10, dtype=np.float32)[::2],
    lambda: np.arange(5, dtype=np.float32).astype(">f4"),
    lambda: unaligned(np.arange(5, dtype=np.float32)),
    lambda: np.arange(5, dtype=np.float32)[::-1],
])
def test_non_contiguous_byte_swapped_and_unaligned_inputs(mod, native_entries, monkeypatch, make):
    x = make()
    assert not (x.flags.c_contiguous and x.flags.aligned and x.dtype.isnative)
    c, _ = both(mod.add, lambda: (make(), np.ones(5, np.float32)), monkeypatch)
    np.testing.assert_array_equal(c, make().astype(np.float32) + 1)


@needs_native
def test_non_contiguous_and_byte_swapped_arrays_written_in_place(mod, native_entries, monkeypatch):
    def strided():
        return np.zeros(10)[::2], 1.0, np.arange(5.0)
    out, (y, _) = both(mod.axpy, strided, monkeypatch)
    np.testing.assert_array_equal(y, np.arange(5.0))
    out, (y, _) = both(mod.axpy, lambda: (np.zeros(5, ">f8"), 2.0, np.arange(5.0)), monkeypatch)
    assert y.dtype == np.dtype(">f8")
    np.testing.assert_array_equal(y, 2 * np.arange(5.0))


@needs_native
@pytest.mark.parametrize("x, s", [
    (np.arange(3.0), 3), (np.arange(3.0), 2.5), (np.arange(3.0), np.float32(1.5)),
    (np.arange(3, dtype=np.uint8), np.uint8(250)), (np.arange(3, dtype=np.int64), np.int64(2 ** 40)),
    (np.arange(3, dtype=np.int64), -2 ** 63), (np.arange(3, dtype=np.int64), 2 ** 63 - 1),
    (np.arange(3.0), np.float64(-0.25)), (np.arange(3, dtype=np.float16), np.float16(0.5)),
    (np.arange(3, dtype=np.float32), 0.1), (np.arange(3, dtype=np.float32), 1e300),
])
def test_scalars(mod, native_entries, monkeypatch, x, s):
    c, _ = both(mod.addk, lambda: (x.copy(), s), monkeypatch)
    assert not isinstance(c, Exception)


@needs_native
@pytest.mark.parametrize("s", [2 ** 63, 2 ** 70, -2 ** 63 - 1])
def test_scalars_that_do_not_fit(mod, native_entries, monkeypatch, s):
    e, _ = both(mod.addk, lambda: (np.arange(3.0), s), monkeypatch)
    assert isinstance(e, hyb.HybridArgumentError) and "does not fit int64" in str(e)


@needs_native
def test_bool_scalars(mod, native_entries, monkeypatch):
    for on in (True, False, np.bool_(True), np.bool_(False)):
        c, _ = both(mod.flag, lambda: (np.arange(3.0), on), monkeypatch)
        np.testing.assert_array_equal(c, np.arange(3.0) * (1 if on else -1))


@needs_native
def test_value_specialised_scalars(mod, native_entries, monkeypatch):
    for n in (3, 5, 3, np.int32(4)):
        c, _ = both(mod.ramp, lambda: (n, 0.5), monkeypatch)
        np.testing.assert_array_equal(c, 0.5 * np.arange(int(n)))
    assert 0 in mod.ramp._value_params
    assert {k[0] for k in mod.ramp._plans} >= {(int, 3), (int, 5), (np.int32, np.int32(4))}


@needs_native
def test_zero_dim_and_size_zero_arrays(mod, native_entries, monkeypatch):
    (s, m), _ = both(mod.stats, lambda: (np.zeros(0, np.float32),), monkeypatch)
    assert s == 0 and m.shape == (0,)
    c, _ = both(mod.add, lambda: (np.zeros(0), np.zeros(0)), monkeypatch)
    assert c.shape == (0,)
    c, _ = both(mod.addk, lambda: (np.zeros(0), 1), monkeypatch)
    assert c.shape == (0,)
    y, _ = both(mod.axpy, lambda: (np.zeros(0), 1.0, np.zeros(0)), monkeypatch)
    assert y.shape == (0,)


@needs_native
def test_a_kernel_that_prints(mod, native_entries, monkeypatch, capsys):
    for name, call in DISPATCHERS.items():
        monkeypatch.setattr(fastcall, "call", call)
        mod.shout(np.arange(2.0))
        capsys.readouterr()
        c = mod.shout(np.arange(2.0))
        assert capsys.readouterr().out == "a 0 0.0\na 1 1.0\n", name
        np.testing.assert_array_equal(c, [1.0, 2.0])


@needs_native
def test_a_failed_bounds_check(mod, native_entries, monkeypatch):
    c, _ = both(mod.pick, lambda: (np.arange(4.0), 3), monkeypatch)
    assert c[0] == 3.0
    for k in (4, -5):
        e, _ = both(mod.pick, lambda: (np.arange(4.0), k), monkeypatch)
        assert isinstance(e, hyb.HybridIndexError) and "out of bounds for axis 0 of `a`" in str(e)


@needs_native
def test_a_foreign_argument_and_keyword_arguments(mod, native_entries, monkeypatch):
    c, _ = both(mod.add, lambda: ([1.0, 2.0], np.ones(2)), monkeypatch)
    np.testing.assert_array_equal(c, [2.0, 3.0])
    e, _ = both(mod.add, lambda: ("no", np.ones(2)), monkeypatch)
    assert isinstance(e, hyb.HybridTypeError)
    monkeypatch.setattr(fastcall, "call", fastcall.native_call)
    np.testing.assert_array_equal(mod.axpy(np.ones(2), x=np.ones(2), a=3.0), [4.0, 4.0])


@needs_native
def test_threads_calling_one_kernel_at_once(mod, native_entries, monkeypatch):
    monkeypatch.setattr(fastcall, "call", fastcall.native_call)
    k = hyb.compile_source(SRC, "fastcall-threads.hyb")
    errors = []

    def work(t):
        try:
            for r in range(200):
                n = 1 + (t + r) % 3  # three signatures: calls compile some while others run
                a = np.full(n, t, np.float32)
                b = np.full(n, r, np.float32)
                np.testing.assert_array_equal(k.add(a, b), np.full(n, t + r, np.float32))
                y = np.full(n, float(r))
                k.axpy(y, 2.0, np.full(n, float(t)))
                np.testing.assert_array_equal(y, r + 2.0 * t)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert len(k.add._plans) == 3 and len(k.axpy._plans) == 3


# ------------------------------------------------------------------ the plan

@needs_native
def test_call_plan():
    mod = hyb.compile_source(SRC, "fastcall-plan.hyb")  # first shapes: code for the shape itself
    ck = mod.add.compile(np.ones(3, np.float32), np.ones(3, np.float32))
    plan = ck.call_plan()
    assert plan is ck.call_plan()  # made once
    assert plan.address == ck._jit.address and not plan.python_only
    assert [s.scalar for s in plan.inputs] == [False, False] and not any(s.written for s in plan.inputs)
    assert plan.made[0].shape == (3,) and plan.made[0].dtype == np.float32
    assert plan.block[:4] == (0, 0, 0, ck.threads) and plan.outputs == (-1,)
    assert mod.shout.compile(np.ones(2)).call_plan().python_only
    axpy = mod.axpy.compile(np.ones(2), 1.0, np.ones(2)).call_plan()
    assert [(s.scalar, s.written) for s in axpy.inputs] == [(False, True), (True, False), (False, False)]
    assert axpy.outputs == (0,) and axpy.made == ()
    entry = fastcall.native_entry(plan)
    assert entry.plan is plan and entry.run == plan.run and not entry.python_only


@needs_native
def test_an_entry_with_a_longer_block_passes_it_whole(mod):
    ck = mod.add.compile(np.ones(3), np.ones(3))
    plan = dataclasses.replace(ck.call_plan(), block=ck.call_plan().block + (7, 8, 9))
    table = {fastcall.fast_key((np.ones(3), np.ones(3))): fastcall.native_entry(plan)}
    np.testing.assert_array_equal(fastcall.native_call(table, frozenset(), (np.ones(3), np.ones(3))), 2.0)
    assert fastcall.native_call(table, frozenset(), (np.ones(4), np.ones(4))) is fastcall.MISS
    assert fastcall.python_call(table, frozenset(), (np.ones(4), np.ones(4))) is fastcall.MISS


VALUES = [0, 1, -1, 127, 128, 255, 256, -129, 2 ** 31, 2 ** 32 + 1, 2 ** 53 + 1, 2 ** 63 - 1, 2 ** 63, 2 ** 64,
          -2 ** 63, -2 ** 63 - 1, 2 ** 70, True, False, 0.1, -1.5, 1e300, -1e-300, float("nan"), float("inf")]


@needs_native
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                                   "float32", "float64", "float16"])
def test_scalar_conversion_to_every_parameter_dtype(mod, dtype):
    """Python numbers given for a parameter of another dtype (a table made by hand: the kernel's
    own keys never mix them) are converted as np.array(value, dtype) converts them, or refused
    where it refuses them (its OverflowError a HybridArgumentError, its ValueError for NaN the same)."""
    x = np.zeros(2)
    plan = mod.addk.compile(x, np.dtype(dtype).type(1)).call_plan()
    entry = fastcall.native_entry(plan)
    for v in VALUES:
        args = (x, v)
        table = {fastcall.fast_key(args): entry}
        got = []
        for call in DISPATCHERS.values():
            with np.errstate(all="ignore"):
                try:
                    got.append(call(table, frozenset(), args))
                except Exception as e:  # noqa: BLE001 - the error is the outcome compared
                    got.append(e)
        same(*got)
        with np.errstate(all="ignore"):
            try:
                want = x + np.array(v, dtype)
            except (OverflowError, ValueError) as e:
                want = e
        if isinstance(want, OverflowError):
            assert isinstance(got[0], hyb.HybridArgumentError) and f"does not fit {dtype}" in str(got[0]), (v, got[0])
        elif isinstance(want, Exception):
            assert type(got[0]) is type(want) and str(got[0]) == str(want), (v, got[0], want)
        else:
            assert isinstance(got[0], np.ndarray), (v, got[0])
            same(got[0], want)


@needs_native
@pytest.mark.parametrize("n", [1, 7, 22, 31, 32])
def test_native_functions_of_many_buffers(native_entries, monkeypatch, n):
    """n inputs and an output: the C dispatcher calls functions of up to MAX_BUFFERS buffers itself
    and leaves longer ones to the Python path."""
    names = [f"a{k}" for k in range(n)]
    src = (f"def many({', '.join(names)}):\n    c = output_tensor(a0.shape, a0.dtype)\n"
           f"    for i in range(a0.shape[0]):\n        c[i] = {' + '.join(f'{a}[i] * {k + 1}' for k, a in enumerate(names))}\n"
           "    return c\n")
    kernel = hyb.compile_source(src, f"many{n}.hyb").many
    args = [np.full(3, k, np.int64) for k in range(n)]
    want = np.full(3, sum(k * (k + 1) for k in range(n)), np.int64)
    monkeypatch.setattr(fastcall, "call", fastcall.native_call)
    np.testing.assert_array_equal(kernel(*args), want)  # compiles
    entry = kernel._plans[fastcall.fast_key(args)]
    assert entry.python_only == (n + 1 > fastcall.native.MAX_BUFFERS)
    seen = counting(kernel, args)
    np.testing.assert_array_equal(kernel(*args), want)
    assert len(seen) == entry.python_only
