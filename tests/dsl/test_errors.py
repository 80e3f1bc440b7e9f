"""Bad input: each rejected construct raises the exact HybridError subclass at the exact place."""
import importlib.util
import inspect

import numpy as np
import pytest

import hyb
from hyb.errors import (HybridArgumentError, HybridError, HybridIndexError, HybridNameError,
                        HybridSyntaxError, HybridTypeError, HybridUnsupportedError)

HEAD = "def k(a):\n    c = output_tensor(a.shape, a.dtype)\n"
LOOP = HEAD + "    for i in range(a.shape[0]):\n"

# (name, source, error class, line, col, words the message must contain)
CASES = [
    ("while", HEAD + "    i = 0\n    while i < 3:\n        i += 1\n    return c\n",
     HybridUnsupportedError, 4, 5, "`while` loops are not supported"),
    ("break", LOOP + "        break\n    return c\n", HybridUnsupportedError, 4, 9, "`break` is not supported"),
    ("continue", LOOP + "        continue\n    return c\n", HybridUnsupportedError, 4, 9, "`continue`"),
    ("import", "import numpy\n" + HEAD + "    return c\n", HybridUnsupportedError, 1, 1, "`import`"),
    ("missing colon", "def k(a)\n    return a\n", HybridSyntaxError, 1, 9, "unexpected end of line"),
    ("bad indent", HEAD + "      c[0] = 1\n    return c\n", HybridSyntaxError, 3, 7, "unexpected indentation"),
    ("bad dedent", LOOP + "        c[i] = 1\n  c[0] = 1\n    return c\n", HybridSyntaxError, 5, 1,
     "unindent does not match"),
    ("bad character", "def k(a):\n    c = output_tensor(a.shape, a.dtype) $\n    return c\n",
     HybridSyntaxError, 2, 41, "unexpected character '$'"),
    ("unclosed paren", "def k(a):\n    c = output_tensor(a.shape, a.dtype\n", HybridSyntaxError, 2, 22,
     "`(` is never closed"),
    ("unclosed paren before a statement", "def k(a):\n    c = output_tensor(a.shape, a.dtype\n"
     "    for i in range(a.shape[0]):\n        c[i] = a[i]\n    return c\n", HybridSyntaxError, 2, 22,
     "`(` is never closed"),
    ("unclosed inner paren", "def k(a):\n    c = output_tensor((a.shape[0], a.dtype)\n    return c\n",
     HybridSyntaxError, 2, 22, "`(` is never closed"),
    ("numpy dtype", "def k(a):\n    c = output_tensor(a.shape, np.float64)\n    return c\n", HybridNameError, 2, 32,
     "`np.float64` is NumPy's name of a dtype; kernels write dtypes as strings"),
    ("numpy cast", LOOP + "        c[i] = np.float32(a[i])\n    return c\n", HybridNameError, 4, 16,
     "`np.float32(...)` is NumPy's spelling of a cast"),
    ("numpy function", LOOP + "        c[i] = np.exp(a[i])\n    return c\n", HybridNameError, 4, 16,
     "`np.exp` is not available inside kernels"),
    ("math function", LOOP + "        c[i] = math.sqrt(a[i])\n    return c\n", HybridNameError, 4, 16,
     "`math.sqrt` is not available inside kernels"),
    ("numpy without a kernel spelling", LOOP + "        c[i] = np.cumsum(a[i])\n    return c\n", HybridNameError, 4,
     16, "`np` is not available inside kernels"),
    ("astype", LOOP + "        c[i] = a[i].astype('float32')\n    return c\n", HybridTypeError, 4, 16,
     "`.astype(...)` is NumPy's; kernels convert one value at a time"),
    ("negative index", LOOP + "        c[i] = a[-1]\n    return c\n", HybridIndexError, 4, 18,
     "index -1 is negative: indices do not wrap around in kernels"),
    ("unexpected token", "def k(a):\n    c = = 1\n    return c\n", HybridSyntaxError, 2, 9, "unexpected '='"),
    ("non-ASCII name", LOOP + "        t\u00e9 = a[i]\n        c[i] = t\u00e9\n    return c\n", HybridSyntaxError, 4, 9,
     "name `t\u00e9` has characters other than ASCII letters, digits and `_`"),
    ("unknown name", LOOP + "        c[i] = aa[i]\n    return c\n", HybridNameError, 4, 16, "unknown name `aa`"),
    ("unknown function", LOOP + "        c[i] = sqrtt(a[i])\n    return c\n", HybridNameError, 4, 16,
     "unknown function `sqrtt`"),
    ("intrinsic argument type", LOOP + "        c[i] = popcount(a[i])\n    return c\n", HybridTypeError, 4, 25,
     "popcount() takes integers, this is float32"),
    ("kernel call in an expression", "def sq(x):\n    return x\n\n" + LOOP + "        c[i] = sq(a)[i] + 1.0\n    return c\n",
     HybridTypeError, 7, 16, "a call of kernel `sq` inside an expression"),
    ("intrinsic arity", LOOP + "        c[i] = atan2(a[i])\n    return c\n", HybridTypeError, 4, 16,
     "atan2() takes 2 arguments, got 1"),
    ("attribute", HEAD + "    for i in range(a.size):\n        c[i] = a[i]\n    return c\n", HybridTypeError, 3, 20,
     "no attribute `size`"),
    ("rank", LOOP + "        c[i, 0] = a[i]\n    return c\n", HybridTypeError, 4, 9,
     "`c` has 1 dimension but is indexed with 2"),
    ("out of bounds", LOOP + "        c[i] = a[i + 1]\n    return c\n", HybridIndexError, 4, 16,
     "out of bounds when i = 3"),
    ("out of bounds write", LOOP + "        c[i - 1] = a[i]\n    return c\n", HybridIndexError, 4, 9,
     "out of bounds when i = 0"),
    ("assign loop variable", LOOP + "        i = 2\n    return c\n", HybridTypeError, 4, 9,
     "cannot assign to loop variable `i`"),
    ("redefine tensor", HEAD + "    c = output_tensor(a.shape, a.dtype)\n    return c\n", HybridNameError, 3, 5,
     "`c` is already defined"),
    ("assign over tensor", HEAD + "    c = 1.0\n    return c\n", HybridNameError, 3, 5, "`c` is a tensor"),
    ("return scalar", "def k(a):\n    s = a[0]\n    return s\n", HybridTypeError, 3, 12, "`s` is a scalar"),
    ("return expression", HEAD + "    return c + 1\n", HybridTypeError, 3, 12, "returns tensors by name"),
    ("scope", LOOP + "        s = a[i]\n    c[0] = s\n    return c\n", HybridNameError, 5, 12,
     "`s` is not visible here"),
    ("shape index not constant", LOOP + "        c[i] = a.shape[i]\n    return c\n", HybridTypeError, 4, 24,
     "index into a shape must be an integer constant"),
    ("list", "def k(a):\n    c = output_tensor([3], a.dtype)\n    return c\n", HybridUnsupportedError, 2, 23,
     "lists are not supported"),
    ("slice", HEAD + "    c[:] = 1\n    return c\n", HybridUnsupportedError, 3, 7, "slices are not supported"),
    ("no return", HEAD, HybridTypeError, 1, 5, "returns nothing and writes none of its inputs"),
    ("a helper's missing result assigned", "def fill(b, v):\n    for i in range(b.shape[0]):\n        b[i] = v\n\n"
     + HEAD + "    t = fill(c, 1.0)\n    return c\n", HybridTypeError, 7, 9,
     "kernel `fill` returns nothing, so its result cannot be assigned"),
    ("a helper that returns and writes nothing", "def h(b):\n    for i in range(b.shape[0]):\n        s = b[i]\n\n"
     + HEAD + "    h(a)\n    return c\n", HybridTypeError, 1, 5,
     "kernel `h` returns nothing and writes none of its arguments"),
    ("dtype typo", "def k(a):\n    c = output_tensor(a.shape, 'flaot32')\n    return c\n", HybridTypeError, 2, 32,
     "unknown dtype 'flaot32'"),
    ("run-time out of bounds", LOOP + "        c[i * i] = 1.0\n    return c\n", HybridIndexError, 4, 9,
     "kernel `k`: index 4 is out of bounds for axis 0 of `c` (shape (4,))"),
    ("float index", LOOP + "        c[i] = a[a[i]]\n    return c\n", HybridTypeError, 4, 18,
     "an index must be an integer"),
    ("misspelled loop hint", HEAD + "    for i in rnage(a.shape[0]):\n        c[i] = 1\n    return c\n", HybridNameError,
     3, 14, "unknown function `rnage`"),
    ("loop over non-range", HEAD + "    for i in a:\n        c[i] = 1\n    return c\n", HybridTypeError, 3, 14,
     "must iterate over range"),
    ("range arity", HEAD + "    for i in range(1, 2, 3, 4):\n        c[i] = 1\n    return c\n", HybridTypeError, 3, 14,
     "takes 1 to 3 arguments"),
    ("zero step", HEAD + "    for i in range(0, 4, 0):\n        c[i] = 1\n    return c\n", HybridTypeError, 3, 26,
     "step cannot be zero"),
    ("loop variable reused", LOOP + "        for i in range(2):\n            c[i] = 1\n    return c\n",
     HybridNameError, 4, 13, "loop variable `i` is already in use"),
    ("tensor as number", LOOP + "        c[i] = a + 1\n    return c\n", HybridTypeError, 4, 16,
     "tensor `a` is used as a number"),
    ("condition not bool", LOOP + "        if a[i]:\n            c[i] = 1\n    return c\n", HybridTypeError, 4, 12,
     "a condition must be"),
    ("tuple assignment counts", HEAD + "    x, y = 1, 2, 3\n    return c\n", HybridTypeError, 3, 12,
     "3 values assigned to 2 targets"),
    ("unpacking a shape of another rank", HEAD + "    n, m = a.shape\n    return c\n", HybridTypeError, 3, 12,
     "1 value assigned to 2 targets"),
    ("unpacking a tensor", HEAD + "    x, y = a\n    return c\n", HybridTypeError, 3, 12,
     "cannot unpack a tensor into 2 names"),
    ("nested tuple target", HEAD + "    (x, y), z = 1, 2\n    return c\n", HybridUnsupportedError, 3, 5,
     "nested tuple targets are not supported"),
    ("tuple target of an expression", HEAD + "    x, y + 1 = 1, 2\n    return c\n", HybridTypeError, 3, 8,
     "cannot assign to this expression"),
    ("chained assignment", HEAD + "    x = y = 1\n    return c\n", HybridUnsupportedError, 3, 5,
     "chained assignment"),
    ("nested def", HEAD + "    def f(x):\n        return x\n    return c\n", HybridUnsupportedError, 3, 5,
     "nested function"),
    ("return in loop", LOOP + "        return c\n", HybridUnsupportedError, 4, 9, "`return` inside a loop"),
    ("bool arithmetic", LOOP + "        c[i] = (a[i] > 0) + (a[i] < 1)\n    return c\n", HybridTypeError, 4, 16,
     "arithmetic `+` on two bool values"),
    ("output in loop", LOOP + "        d = output_tensor(a.shape, a.dtype)\n    return c\n", HybridUnsupportedError, 4, 13,
     "output_tensor(...) inside a loop"),
    ("output_tensor arity", "def k(a):\n    c = output_tensor()\n    return c\n", HybridTypeError, 2, 9,
     "takes a shape and a dtype"),
    ("discarded expression", LOOP + "        a[i] + 1\n    return c\n", HybridTypeError, 4, 9,
     "computed and thrown away"),
    ("duplicate kernel", HEAD + "    return c\n" + HEAD + "    return c\n", HybridNameError, 4, 5,
     "kernel `k` is defined twice"),
    ("unknown decorator", "@jit\n" + HEAD + "    return c\n", HybridUnsupportedError, 1, 1, "unknown decorator"),
    ("in operator", LOOP + "        if i in a:\n            c[i] = 1\n    return c\n", HybridUnsupportedError, 4, 14,
     "`in` is not supported"),
]


@pytest.mark.parametrize("name,src,cls,line,col,words", CASES, ids=[c[0] for c in CASES])
def test_rejected_construct(name, src, cls, line, col, words):
    x = np.arange(4, dtype=np.float32)
    with pytest.raises(cls) as info:
        mod = hyb.compile_source(src, "bad.hyb")
        mod.k(x)
    e = info.value
    assert isinstance(e, HybridError)
    assert (e.filename, e.line, e.col) == ("bad.hyb", line, col), e.render()
    assert words in e.message, e.render()
    text = str(e)
    # file:line:col, the source line and a caret under the column
    assert text.startswith(f"bad.hyb:{line}:{col}: error: ")
    src_line = src.split("\n")[line - 1]
    assert src_line in text
    caret_line = next(ln for ln in text.split("\n") if ln.strip().endswith("^") or "^" in ln.split("|")[-1])
    assert caret_line.split("| ", 1)[1].index("^") == col - 1


def test_every_error_has_a_hint_or_clear_message():
    for name, src, cls, line, col, words in CASES:
        try:
            hyb.compile_source(src, "bad.hyb").k(np.arange(4, dtype=np.float32))
        except HybridError as e:
            assert e.message and (e.hint or len(e.message) > 20), name


def test_unsupported_is_also_not_implemented():
    with pytest.raises(NotImplementedError):
        hyb.compile_source(LOOP + "        c[i] = a[i] @ a[i]\n    return c\n").k(np.ones(3))


def test_no_lark_exception_leaks_on_garbage():
    rng = np.random.default_rng(1)
    base = LOOP + "        c[i] = a[i] * 2.0 + 1\n    return c\n"
    for _ in range(200):
        chars = list(base)
        for _ in range(rng.integers(1, 4)):
            pos = int(rng.integers(0, len(chars)))
            op = rng.integers(0, 3)
            if op == 0:
                del chars[pos]
            elif op == 1:
                chars.insert(pos, chr(int(rng.integers(32, 127))))
            else:
                j = int(rng.integers(0, len(chars)))
                chars[pos], chars[j] = chars[j], chars[pos]
        try:
            m = hyb.compile_source("".join(chars))
            for k in m.kernels.values():
                k.emulate(np.arange(4, dtype=np.float32))
        except HybridError:
            pass


# ---------------------------------------------------------------- @hybrid functions: real file positions
@hyb.hybrid
def _uses_unknown(a):
    c = output_tensor(a.shape, a.dtype)
    for i in range(a.shape[0]):
        c[i] = bogus[i]  # noqa: F821
    return c


def test_hybrid_function_error_points_into_this_file():
    with pytest.raises(HybridNameError) as info:
        _uses_unknown(np.ones(3, dtype=np.float32))
    e = info.value
    lines, first = inspect.getsourcelines(_uses_unknown.__wrapped__)
    expected_line = first + next(n for n, ln in enumerate(lines) if "bogus" in ln)
    assert e.filename == __file__
    assert e.line == expected_line
    assert e.col == lines[expected_line - first].index("bogus") + 1
    assert "bogus[i]" in e.source_line


class _Holder:
    # An indented (method-level) kernel: columns are those of the file, not of the dedented text.
    @staticmethod
    def make():
        @hyb.hybrid
        def indented(a):
            c = output_tensor(a.shape, a.dtype)
            for i in range(a.shape[0]):
                c[i] = a[i + 5]
            return c
        return indented


def test_indented_hybrid_function_columns():
    k = _Holder.make()
    with pytest.raises(HybridIndexError) as info:
        k(np.ones(3, dtype=np.float32))
    e = info.value
    assert e.source_line.strip() == "c[i] = a[i + 5]"
    assert e.col == e.source_line.index("a[i + 5]") + 1


# ---------------------------------------------------------------- call-time errors
ADD = hyb.compile_source("def add(a, b):\n    c = output_tensor(a.shape, a.dtype)\n"
                         "    for i in range(a.shape[0]):\n        c[i] = a[i] + b[i]\n    return c\n", "add.hyb").add


def test_wrong_argument_count():
    with pytest.raises(HybridArgumentError) as info:
        ADD(np.ones(3))
    assert "takes 2 arguments (a, b) but was called with 1" in info.value.message
    assert info.value.line == 1


def test_shape_mismatch_is_an_index_error_not_a_crash():
    with pytest.raises(HybridIndexError) as info:
        ADD(np.ones(5), np.ones(3))
    assert "`b` (shape (3,)) is indexed out of bounds when i = 3" in info.value.message
    assert (info.value.line, info.value.col) == (4, 23)


def test_scalar_passed_for_an_indexed_parameter():
    with pytest.raises(HybridTypeError) as info:
        ADD(np.ones(3), 2.0)
    assert info.value.message == "`b` is a scalar (float64 argument) and cannot be indexed"
    assert (info.value.line, info.value.col) == (4, 23)


def test_unsupported_dtype_argument():
    with pytest.raises(HybridArgumentError, match="complex128"):
        ADD(np.ones(3, dtype=complex), np.ones(3, dtype=complex))


def test_compiled_kernel_rejects_other_signature():
    ck = ADD.compile(np.ones(3), np.ones(3))
    with pytest.raises(HybridArgumentError, match=r"compiled for \(float64\[3\], float64\[3\]\)"):
        ck(np.ones(4), np.ones(4))


def test_unknown_inspect_stage():
    ck = ADD.compile(np.ones(3), np.ones(3))
    with pytest.raises(HybridArgumentError, match="unknown stage"):
        ck.inspect("nonsense")


def test_unknown_option():
    with pytest.raises(HybridArgumentError, match="unknown kernel option `fast`"):
        hyb.compile_source("def k(a):\n    return a\n", fast=True)


def test_read_only_in_place_argument():
    k = hyb.compile_source("def inc(a):\n    for i in range(a.shape[0]):\n        a[i] += 1\n    return a\n").inc
    x = np.ones(3)
    x.flags.writeable = False
    with pytest.raises(HybridArgumentError, match="read-only"):
        k(x)


def test_render_without_span():
    e = HybridArgumentError("something is wrong", None, "do this")
    assert str(e) == "error: something is wrong\nhint: do this"


@pytest.mark.skipif(importlib.util.find_spec("pycuda") is not None, reason="pycuda is installed")
def test_cuda_without_pycuda_says_so():
    x = np.ones(3)
    with pytest.raises(HybridUnsupportedError, match="needs pycuda, which is not installed") as info:
        hyb.compile_source(ADD.source, "add.hyb", target="cuda").add(x, x)
    assert isinstance(info.value, NotImplementedError)
    assert "__global__" in ADD.compile(x, x).inspect("cuda")


# ------------------------------------------------------------------ gradients not built yet
GRAD_UNSUPPORTED = [
    ("def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    n = allocate((1,), 'int64')\n    n[0] = 2\n"
     "    for i in range(a.shape[0]):\n        for j in range(n[0]):\n            c[i] += a[i]\n        n[0] = 3\n"
     "    return c\n", "a loop bound that the kernel changes while it runs", 6, 9),
]


@pytest.mark.parametrize("src,what,line,col", GRAD_UNSUPPORTED, ids=["data-bound"])
def test_gradient_of_unsupported_construct_names_it(src, what, line, col):
    k = hyb.compile_source(src, "g.hyb").k
    with pytest.raises(HybridUnsupportedError) as info:
        k.grad()
    e = info.value
    assert isinstance(e, NotImplementedError)
    assert f"the gradient of a kernel with {what} is not built yet" in str(e)
    assert (e.span.line, e.span.col) == (line, col), str(e)
    assert str(e).startswith(f"g.hyb:{line}:{col}: error:")
    assert "^" in str(e)


def test_gradient_with_only_integer_inputs_is_none():
    src = "def k(a, b):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(a.shape[0]):\n        c[i] = a[i] * b[i]\n    return c\n"
    g = hyb.compile_source(src, "g.hyb").k.grad()
    x = np.arange(3, dtype=np.int32)
    assert g(x, x, np.ones(3, np.int32)) == (None, None)


@pytest.mark.parametrize("call,got", [("a.dtype(a[i], 2)", 2), ("a.dtype()", 0)])
def test_dtype_cast_takes_one_argument(call, got):
    src = f"def k(a):\n    c = output_tensor(a.shape, a.dtype)\n    for i in range(a.shape[0]):\n        c[i] = {call}\n    return c\n"
    with pytest.raises(HybridTypeError) as info:
        hyb.compile_source(src, "g.hyb").k(np.ones(3))
    e = info.value
    assert (e.span.line, e.span.col) == (4, 16)
    assert str(e).startswith(f"g.hyb:4:16: error: a dtype takes 1 argument, got {got}")
    assert "x.dtype(0) is a zero of x's dtype" in str(e)


# NumPy habits get the kernel spelling as their hint.
HABIT_HINTS = [
    ("def k(a):\n    c = output_tensor(a.shape, np.float64)\n    return c\n", 'write "float64"'),
    (LOOP + "        c[i] = np.float32(a[i])\n    return c\n", "write `float32(x)`"),
    (LOOP + "        c[i] = np.exp(a[i])\n    return c\n", "write `exp(...)`"),
    (LOOP + "        c[i] = np.maximum(a[i], 0.0)\n    return c\n", "write `max(...)`"),
    (LOOP + "        c[i] = a[i].astype(np.int32)\n    return c\n", "write `int32(x)`"),
    (LOOP + "        c[i] = a[-1]\n    return c\n", "write `a[a.shape[0] - 1]`"),
    (LOOP + "        c[i] = a[i - 2]\n    return c\n", "guard the access"),  # not a constant: the bounds error
]


@pytest.mark.parametrize("src,hint", HABIT_HINTS)
def test_numpy_habits_get_the_kernel_spelling(src, hint):
    with pytest.raises(HybridError) as info:
        hyb.compile_source(src, "bad.hyb").k(np.arange(4, dtype=np.float32))
    assert hint in (info.value.hint or ""), info.value.render()


GLOBAL_W = np.ones(4)


def test_a_captured_global_array_is_to_be_passed_as_an_argument():
    @hyb.hybrid
    def uses_global(a):
        c = output_tensor(a.shape, a.dtype)  # noqa: F821 - a kernel built-in
        for i in range(a.shape[0]):
            c[i] = a[i] * GLOBAL_W[i]
        return c

    with pytest.raises(HybridNameError) as info:
        uses_global(np.zeros(4))
    e = info.value
    assert e.message == "unknown name `GLOBAL_W`"
    assert e.hint == "`GLOBAL_W` is a NumPy array outside the kernel, which kernels cannot read: pass it as an argument"
    assert e.filename.endswith("test_errors.py") and e.col == 27 and "GLOBAL_W[i]" in e.span.source_line
