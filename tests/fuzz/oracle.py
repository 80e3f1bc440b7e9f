"""The judges of one fuzzing case.  Each raises AssertionError (or the unexpected exception) on a bug
and returns a short word saying what was checked otherwise.  Every compile they make is timed by
the compile-time oracle (:mod:`.compile_time`): one over its limit twice raises CompileTimeError."""
from __future__ import annotations

import random
import re
import time
import warnings

import numpy as np

import hyb
from tests.autodiff import gradcases as G

from . import compile_time, programs
from .compile_time import CompileTimeError, Hang, time_limit  # noqa: F401 - the judges' failures and limits

RTOL = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-5, "float64": 1e-12}
RTOL_INEXACT = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 1e-4, "float64": 1e-10}  # transcendental intrinsics, pow()


# ------------------------------------------------------------------ compiled == emulate
def as_tuple(r):
    return r if isinstance(r, tuple) else (r,)


def copy(a):
    return a.copy() if isinstance(a, np.ndarray) else a


def assert_same(got, want, what, rtol=RTOL):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} (compiled) != {want.shape} (emulated)"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} (compiled) != {want.dtype} (emulated)"
    name = want.dtype.name
    if name == "bfloat16":  # exactly as float32 (NumPy's testing knows its own floats only)
        got, want = got.astype(np.float32), want.astype(np.float32)
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: nan positions")
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=f"{what}: infinities")
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), finite, err_msg=f"{what}: finite positions")
    if finite.any():
        r = rtol[name]
        scale = max(1.0, float(np.abs(want[finite]).max()))
        np.testing.assert_allclose(got[finite], want[finite], rtol=r, atol=r * scale, err_msg=what)


def outcome(run, args):
    try:
        return as_tuple(run(*args)), None
    except hyb.HybridIndexError as e:
        return None, e


def check_parity(prog, allow_index_errors=False):
    """Compile prog.source with prog.options, run it and emulate it on copies of prog.args; outputs and
    in-place inputs must agree, other inputs must be unchanged.  With allow_index_errors, both must raise
    HybridIndexError or neither."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hyb.HybridWarning)
        try:
            kernel = compile_time.kernel(prog.source, prog.args, prog.options)
        except (hyb.HybridTypeError, hyb.HybridArgumentError, hyb.HybridIndexError):
            # refused for this signature: the call below is refused alike, and judged there
            kernel = hyb.compile_source(prog.source, "generated.hyb", **prog.options).k
        c_args = [copy(a) for a in prog.args]
        e_args = [copy(a) for a in prog.args]
        try:
            got, got_err = outcome(kernel, c_args)
        except (hyb.HybridTypeError, hyb.HybridArgumentError) as rejected:
            # a program the checker refuses for this signature (a weak float constant that leaves an
            # integer output's range; a Python int argument out of the dtype it meets, as NumPy's
            # OverflowError): emulate, which checks the same way, must refuse it alike
            try:
                kernel.emulate(*e_args)
            except (hyb.HybridTypeError, hyb.HybridArgumentError) as also:
                assert str(also) == str(rejected), f"compiled: {rejected}\nemulate: {also}"
                return "rejected"
            raise AssertionError(f"compiled raised {rejected!r}, emulate ran") from None
        emu, emu_err = outcome(kernel.emulate, e_args)
    if not allow_index_errors:
        if emu_err is not None:
            raise emu_err
        if got_err is not None:
            raise got_err
    assert (got_err is None) == (emu_err is None), f"compiled raised {got_err!r}, emulate raised {emu_err!r}"
    if got_err is not None:
        return "index-error"
    rtol = RTOL_INEXACT if prog.inexact else RTOL
    # A float64 output computed from float32 arguments (sin of a float32 parameter) carries float32
    # rounding: NumPy's float32 sin and libm's may differ by an ulp.
    widest = max((rtol[np.dtype(a.dtype).name] for a in prog.args
                  if hasattr(a, "dtype") and np.dtype(a.dtype).name in rtol), default=0.0)
    rtol = {k: max(v, widest) for k, v in rtol.items()}
    assert len(got) == len(emu), f"{len(got)} outputs compiled, {len(emu)} emulated"
    for n, (g, e) in enumerate(zip(got, emu)):
        assert_same(g, e, f"output {n}", rtol)
    for pos, (orig, c, e) in enumerate(zip(prog.args, c_args, e_args)):
        if not isinstance(orig, np.ndarray):
            continue
        if pos in prog.inplace:
            assert_same(c, e, f"input {pos} (written in place)", rtol)
        else:
            bits = f"u{orig.dtype.itemsize}"  # bit for bit (NaN too, in every float dtype)
            np.testing.assert_array_equal(c.view(bits), orig.view(bits), err_msg=f"compiled kernel changed input {pos}")
            np.testing.assert_array_equal(e.view(bits), orig.view(bits), err_msg=f"emulate changed input {pos}")
    return "ok"


# ------------------------------------------------------------------ gradient == finite differences
# Known hyb bugs the fuzzers step around (each pinned by an xfail(strict=True) test in tests/fuzz/test_fuzz.py):
KNOWN_BUG_ZERO_D_INPUT_GRADIENT = False
KNOWN_BUG_GRAD_DROPS_SCALAR = False  # test_regression_gradient_of_two_scalars_updated_in_one_inner_loop
# test_regression_product_accumulated_in_a_tensor_element (`y[0] *= x[i]` in a loop took each iteration's
# old y[0] for the value stored before the loop).  While set, a gradient that disagrees with finite
# differences in a program updating a tensor element from itself is counted as this bug instead of failing.
KNOWN_BUG_PRODUCT_INTO_AN_ELEMENT = False
SELF_UPDATE = re.compile(r"^\s*(\w+\[[^\]\n]*\]) (?:[*/]=|=[^\n]*\1)", re.MULTILINE)

def fresh_floats(args, rng):
    """Float arrays replaced by values in ±[0.3, 1.5]: no denormals, no infinities, no ties."""
    return [np.asarray(rng.uniform(0.3, 1.5, a.shape) * rng.choice([-1.0, 1.0], a.shape), dtype=a.dtype)
            if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in args]


def grid_floats(args, rng):
    """Float arrays replaced by integers from -3 to 3: a maximum over a few of them ties often."""
    return [np.asarray(rng.integers(-3, 4, a.shape), dtype=a.dtype)
            if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in args]


def widened(values):
    """float32 arrays as float64 (the same numbers)."""
    return [a.astype(np.float64) if isinstance(a, np.ndarray) and a.dtype == np.float32 else a for a in values]


def sum_length(args):
    """A bound on the number of terms of any sum in a gradient kernel: the largest input."""
    return max([a.size for a in args if isinstance(a, np.ndarray)] + [1])


def gradient_rtol(dtype, length):
    """Tolerance (relative to the largest magnitude, see assert_same) between two gradients that may
    add the same terms in different orders: gradient kernels' sums are reassociated when compiled,
    not when emulated.  A sum of `length` terms reordered moves by up to about length * eps of its
    terms' magnitudes; 8 * length * eps leaves room for the cancellation of a few of them."""
    name = np.dtype(dtype).name
    if name not in RTOL_INEXACT:
        return RTOL_INEXACT["float64"]
    return max(RTOL_INEXACT[name], 8 * length * float(np.finfo(dtype).eps))


def assert_gradients_agree(got, want, what, length):
    assert len(got) == len(want), f"{what}: {len(got)} gradients vs {len(want)}"
    for n, (a, b) in enumerate(zip(got, want)):
        if a is None or b is None:
            assert a is None and b is None, f"gradient {n}: {what}: {a!r} vs {b!r}"
        else:
            r = gradient_rtol(np.asarray(b).dtype, length)
            assert_same(a, b, f"gradient {n} ({what})", {k: r for k in RTOL_INEXACT})


def unsupported(e):
    """The outcome of a gradient hyb refuses, naming the construct (numbers in names dropped)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    text = text.split("error: ", 1)[-1]
    return "skipped: unsupported (" + re.sub(r"\d+", "", text)[:90] + ")"


def closed_form(prog, g, args):
    """Whether a gradient kernel applied the running maximum / minimum rule (it counts the ties of
    `m` in `m_ties`); the scalars it applied it to go to prog.closed."""
    try:
        text = g.source
    except hyb.HybridUnsupportedError:  # a `grid` loop: the source depends on the ranks of the inputs
        text = g.source_for(*args)
    names = tuple(sorted(set(re.findall(r"\b(\w+)_ties\b", text))))
    if isinstance(prog, programs.GradProgram):
        prog.closed = names
    return bool(names)


def derive(prog, args, douts):
    """(gradient kernel, compiled gradient, emulated gradient), or (None, outcome) where hyb refuses.
    The gradient kernel of prog's kernel is derived and compiled for the signature of args and
    douts afresh (the compile-time oracle times it)."""
    try:
        g = compile_time.gradient(prog.source, [*args, *douts], prog.options)
        got = as_tuple(g(*G.copies(args), *G.copies(douts)))
    except hyb.HybridUnsupportedError as e:
        assert "`" in str(e) or "not" in str(e), f"refusal without naming the construct: {e}"
        return None, unsupported(e), None
    except hyb.HybridNameError as e:
        if KNOWN_BUG_GRAD_DROPS_SCALAR and "unknown name" in str(e) and "<gradient of" in str(e):
            return None, "known bug: gradient drops a scalar", None
        raise
    return g, list(got), list(as_tuple(g.emulate(*G.copies(args), *G.copies(douts))))


def check_grad(prog, seed=0):
    """kernel.grad() (compiled with prog.options, and emulated) against central finite differences of
    sum(dout * kernel(x)).  Returns "skipped: ..." where the case cannot be judged: a forward value that
    is not finite, a gradient hyb refuses (HybridUnsupportedError), a kink (finite differences with
    different steps disagree).

    A program of float32 tensors written for any float dtype (tests/fuzz/programs.GradProgram, whose
    tensors all take x0's dtype) is also run on the same values as float64: its float32 gradient is
    compared with the float64 one, and the float64 gradient with finite differences.  A closed-form
    running maximum adds ", closed form" to "ok"."""
    rng = np.random.default_rng(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hyb.HybridWarning)
        draw = grid_floats if getattr(prog, "values", "fresh") == "grid" else fresh_floats
        args = draw(prog.args, rng)
        if not any(G.is_float_array(a) for a in args):
            return "skipped: no float input"
        try:
            k = compile_time.kernel(prog.source, args, prog.options)
            outs = G.forward(k, args)
        except hyb.HybridIndexError:
            return "skipped: index error"
        if not all(o.dtype.kind == "f" and np.all(np.isfinite(o)) for o in outs):
            return "skipped: forward not finite"
        douts = G.random_douts(rng, outs)
        g, got, emu = derive(prog, args, douts)
        if g is None:
            return got
        closed = closed_form(prog, g, args)
        length = sum_length(args)
        assert_gradients_agree(got, emu, "compiled vs emulated gradient kernel", length)
        narrow = isinstance(prog, programs.GradProgram) and any(
            isinstance(a, np.ndarray) and a.dtype == np.float32 for a in args)
        if narrow:
            args, douts = widened(args), widened(douts)
            k = compile_time.kernel(prog.source, args, prog.options)
            outs = G.forward(k, args)
            narrow_got = got
            _, got, emu = derive(prog, args, douts)
            assert_gradients_agree(got, emu, "compiled vs emulated gradient kernel, float64", length)
            for n, (a, b) in enumerate(zip(narrow_got, got)):
                if a is not None and b is not None:
                    r = 16 * length * float(np.finfo(np.float32).eps) + 1e-4
                    assert_same(np.asarray(a, np.float64), b, f"gradient {n} (float32 vs float64)", {"float64": r})
    want = G.fd_grads(k, args, douts)
    if KNOWN_BUG_ZERO_D_INPUT_GRADIENT:
        # A 0-d float tensor input gets None for its gradient (tests/fuzz/test_fuzz.py,
        # test_regression_zero_d_input_gets_a_gradient): judge the other inputs.
        for n, a in enumerate(args):
            if G.is_float_array(a) and a.ndim == 0 and got[n] is None:
                want[n] = None
    if any(g_ is not None and w is not None and np.isnan(g_).any() and np.isfinite(w).all()
           for g_, w in zip(got, want)):
        return "skipped: nan adjoint"
    atol = 1e-7 + 1e-9 * G.loss_scale(outs, douts)
    try:
        G.assert_grads_close(got, want, rtol=1e-5, atol=atol, what="gradient vs finite differences")
    except AssertionError:
        for eps in (1e-5, 3e-7):
            try:
                G.assert_grads_close(G.fd_grads(k, args, douts, eps=eps), want, rtol=1e-4, atol=10 * atol)
            except AssertionError:
                return "skipped: kink"
        if KNOWN_BUG_PRODUCT_INTO_AN_ELEMENT and SELF_UPDATE.search(prog.source):
            return "known bug: product accumulated in a tensor element"
        raise
    return "ok, closed form" if closed else "ok"


def check_ties(prog, seed=0):
    """A running maximum or minimum on values that tie (programs.tie_programs): the gradient, compiled
    and emulated, against prog.ties.gradient, the even split among tied candidates.  Programs
    without a model (a softmax whose maximum only stabilises it) go to check_grad with tied values."""
    if prog.ties is None:
        return "ties: " + check_grad(prog, seed)
    rng = np.random.default_rng(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hyb.HybridWarning)
        args = grid_floats(prog.args, rng)
        k = compile_time.kernel(prog.source, args, prog.options)
        outs = G.forward(k, args)
        douts = G.random_douts(rng, outs)
        g, got, emu = derive(prog, args, douts)
        if g is None:
            return "ties: " + got
    length = sum_length(args)
    assert_gradients_agree(got, emu, "compiled vs emulated gradient kernel", length)
    if not closed_form(prog, g, args):
        return "ties: skipped, not taken for a running extremum"
    want = prog.ties.gradient(args, douts[0])
    for n, (a, b) in enumerate(zip(got, want)):
        dt = np.asarray(a).dtype
        r = 1e-12 if dt == np.float64 else 1e-5
        scale = max(1.0, float(np.abs(b).max(initial=0.0)))
        np.testing.assert_allclose(np.asarray(a, np.float64), b, rtol=r, atol=r * scale,
                                   err_msg=f"gradient {n} at exact ties vs the even split among tied candidates")
    return "ties: ok, closed form"


def check_gradient_case(name, prog, seed=0):
    """The judge of one case of the gradient campaign (programs.grad_cases)."""
    return check_ties(prog, seed) if name == "ties" else check_grad(prog, seed)


# ------------------------------------------------------------------ front end: mutated text
TOKEN = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|\d+\.?\d*(?:e-?\d+)?|\*\*|//|[-+*/%<>=!]=|\n[ ]*|[ ]+|.", re.DOTALL)
JUNK = ["(", ")", "[", "]", ":", ",", "=", "+", "-", "*", "**", "/", "//", "%", ".", "if", "else", "for", "in",
        "range", "return", "def", "not", "and", "lambda", "while", "'", '"', "\\", "#", "@", "\t", "\n    ",
        "\n", "0", "-1", "1e309", "99999999999999999999", "output_tensor", "allocate", "grid", "shape", "dtype",
        "None", "True", "int8", "float16", "sqrt", "max", "\x00", "\x7f", "é", "\ufeff", "😀", "𝑥", "\r"]


def mutate(text: str, rng: random.Random, rounds: int = 0) -> str:
    """One to three random edits of `text`: token deletion, swap, duplication, replacement by another
    token or by junk, random bytes, line deletion/duplication, indentation changes, truncation."""
    for _ in range(rounds or rng.randint(1, 3)):
        toks = TOKEN.findall(text)
        if not toks:
            return text + rng.choice(JUNK)
        i, j = rng.randrange(len(toks)), rng.randrange(len(toks))
        op = rng.randrange(11)
        if op == 0:
            del toks[i]
        elif op == 1:
            toks[i], toks[j] = toks[j], toks[i]
        elif op == 2:
            toks.insert(i, toks[i])
        elif op == 3:
            toks[i] = toks[j]
        elif op == 4:
            toks.insert(i, rng.choice(JUNK))
        elif op == 5:
            toks[i] = rng.choice(JUNK)
        elif op == 6:
            raw = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
            toks.insert(i, raw.decode("latin-1"))
        elif op == 7:
            return "".join(toks)[: rng.randrange(len(text) + 1)]
        else:
            lines = "".join(toks).split("\n")
            k = rng.randrange(len(lines))
            if op == 8:
                del lines[k]
            elif op == 9:
                lines.insert(k, lines[k])
            else:
                lines[k] = rng.choice(["", " ", "    ", "\t"]) + lines[k] if rng.random() < 0.5 else lines[k].lstrip()
            text = "\n".join(lines)
            continue
        text = "".join(toks)
    return text


def check_frontend(text: str, args, seconds: float | None = None, run: bool = False):
    """Parse `text` and type-check its kernel `k` (if any) for `args`, with run compile it too: timed by
    the compile-time oracle (limit `seconds`, default compile_time.seconds()).  With run, then run it
    and emulate it.  Returns "error" (a HybridError), "parsed" or "valid"; anything else raises."""
    def front(stages):
        mod = compile_time.parse(text, "mutant.hyb", {}, stages)
        kernels = getattr(mod, "kernels", {})
        if "k" not in kernels:
            for kern in kernels.values():
                if not kern.params:
                    kern.typed()
            return "parsed", None
        kern = kernels["k"]
        if run:
            compile_time.compiled(kern.compile(*args), stages)
        else:
            start = time.perf_counter()
            kern.typed(*[copy(a) for a in args])
            stages.append(("check", time.perf_counter() - start))
        return "valid", kern

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            res, kern = compile_time.measure(front, text, seconds)
        except hyb.HybridError:
            return "error"
        if kern is None or not run:
            return res
        try:  # values are not compared: a mutant may feed an inexact value into a condition
            with time_limit(max(seconds or compile_time.seconds(), 20.0)):
                kern(*[copy(a) for a in args])
                kern.emulate(*[copy(a) for a in args])
        except hyb.HybridError:
            return "error"
        return "valid"
