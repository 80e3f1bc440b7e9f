"""Long programs: chains of operators of any length parse, compile, run, emulate and differentiate,
evaluated left to right; only real nesting has a limit; the parser's tables are cached on disk."""
import os
import stat
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import hyb
from hyb.dsl import deep, parser

EXACT = {"schedule": {"reassociate": False}}  # compiled float sums in the program's order


def kernel_text(value: str, out_dtype: str = "a.dtype") -> str:
    return ("def k(a, b):\n"
            f"    c = output_tensor(a.shape, {out_dtype})\n"
            "    for i in range(a.shape[0]):\n"
            f"        c[i] = {value}\n"
            "    return c\n")


TERMS = ["a[i] * 2.0", "b[i]", "a[i] * b[i]", "0.1", "b[i] * 0.3"]  # of mixed_chain, in turn
OPS = ["+", "-", "+", "-", "+", "+", "-"]  # between them, in turn


def mixed_chain(n: int) -> tuple:
    """A chain of ``n`` terms mixing + - * (and its evaluation, left to right, by NumPy)."""
    text = TERMS[0]
    parts = [("+", TERMS[0])]
    for j in range(1, n):
        op, term = OPS[j % len(OPS)], TERMS[j % len(TERMS)]
        text += f" {op} {term}"
        parts.append((op, term))

    def reference(a, b):
        value = None
        for op, term in parts:
            t = {"a[i] * 2.0": a * 2.0, "b[i]": b, "a[i] * b[i]": a * b, "0.1": np.float64(0.1),
                 "b[i] * 0.3": b * 0.3}[term]
            value = t if value is None else (value + t if op == "+" else value - t)
        return value
    return text, reference


def inputs(n=7):
    rng = np.random.default_rng(5)
    # magnitudes far apart: a sum in another order rounds differently
    return rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n), rng.standard_normal(n) * 1e3


# ------------------------------------------------------------------ chains
@pytest.mark.parametrize("n", [3000, 20000])
def test_long_sum_runs(n):
    k = hyb.compile_source(kernel_text(" + ".join(["a[i]"] * n))).k
    a, b = np.ones(4), np.zeros(4)
    np.testing.assert_array_equal(k.emulate(a, b), np.full(4, float(n)))
    if n <= 3000:  # (LLVM's loop vectoriser takes a time growing with the square of a loop body's
        # size: a chain of 20,000 terms compiles in about 30 s)
        np.testing.assert_array_equal(k(a, b), np.full(4, float(n)))


@pytest.mark.parametrize("n", [3000])  # (20,000 terms compile too, in about 30 s: LLVM's vectoriser)
def test_mixed_chain_left_to_right_exactly(n):
    text, reference = mixed_chain(n)
    k = hyb.compile_source(kernel_text(text), **EXACT).k
    a, b = inputs()
    want = reference(a, b)
    np.testing.assert_array_equal(k(a, b), want)
    np.testing.assert_array_equal(k.emulate(a, b), want)


def test_chain_order_is_not_rebalanced():
    # 1e16 + 1 + 1 + ... : left to right each 1 is lost; any regrouping of the ones keeps some
    n = 3000
    k = hyb.compile_source(kernel_text("a[i] + " + " + ".join(["b[i]"] * n)), **EXACT).k
    a, b = np.full(3, 1e16), np.ones(3)
    np.testing.assert_array_equal(k(a, b), a)
    np.testing.assert_array_equal(k.emulate(a, b), a)


def test_long_product_and_difference():
    n = 3000
    k = hyb.compile_source(kernel_text(" - ".join(["a[i]"] * n) + " * " + " * ".join(["b[i]"] * 50)), **EXACT).k
    a, b = inputs()
    want = a.copy()
    for _ in range(n - 2):
        want = want - a
    prod = a.copy()
    for _ in range(50):
        prod = prod * b
    want = want - prod
    np.testing.assert_array_equal(k(a, b), want)
    np.testing.assert_array_equal(k.emulate(a, b), want)


@pytest.mark.parametrize("op", ["and", "or"])
def test_long_boolean_chain(op, monkeypatch):
    from hyb.schedule import extract
    tries = []  # the conditions the extraction tries to read as affine, each part of a chain once
    affine_cond = extract.affine_cond
    monkeypatch.setattr(extract, "affine_cond", lambda e, negate=False: tries.append(e) or affine_cond(e, negate))
    n = 3000
    conds = [f"a[i] > {j - 2}.0" if op == "and" else f"a[i] > {j + 2}.0" for j in range(n)]
    src = ("def k(a):\n"
           "    c = output_tensor(a.shape, 'int32')\n"
           "    for i in range(a.shape[0]):\n"
           f"        if {f' {op} '.join(conds)}:\n"
           "            c[i] = 1\n"
           "    return c\n")
    k = hyb.compile_source(src).k
    a = np.array([-5.0, 0.0, 2.5, 1e9, 2999.5])
    if op == "and":  # every a[i] > j - 2 for j < n: a[i] > n - 3
        want = (a > n - 3).astype(np.int32)
    else:  # some a[i] > j + 2: a[i] > 2
        want = (a > 2).astype(np.int32)
    np.testing.assert_array_equal(k(a), want)
    np.testing.assert_array_equal(k.emulate(a), want)
    assert 0 < len(tries) <= 2 * n  # (not the n * n / 2 of going down the chain at each of its levels)


def test_long_comparison_chain():
    n = 1500
    chain = " < ".join(f"a[i] * {j}.0" for j in range(1, n + 1))  # increasing iff a[i] > 0
    src = ("def k(a):\n"
           "    c = output_tensor(a.shape, 'bool')\n"
           "    for i in range(a.shape[0]):\n"
           f"        c[i] = {chain}\n"
           "    return c\n")
    k = hyb.compile_source(src).k
    a = np.array([-1.0, 0.0, 0.5, 3.0])
    np.testing.assert_array_equal(k(a), a > 0)
    np.testing.assert_array_equal(k.emulate(a), a > 0)


def chain_gradient(n, a, b) -> tuple:
    """The gradient of ``mixed_chain(n)`` with respect to a and b, counted term by term."""
    wa, wb = np.full(len(a), 2.0), np.zeros(len(a))
    for j in range(1, n):
        sign = 1.0 if OPS[j % len(OPS)] == "+" else -1.0
        term = TERMS[j % len(TERMS)]
        if term == "a[i] * 2.0":
            wa = wa + sign * 2.0
        elif term == "b[i]":
            wb = wb + sign
        elif term == "a[i] * b[i]":
            wa, wb = wa + sign * b, wb + sign * a
        elif term == "b[i] * 0.3":
            wb = wb + sign * 0.3
    return wa, wb


def test_gradient_of_a_long_chain():
    # deriving takes time growing with the square of a chain's length; the terms of one read are
    # counted into one increment (equal terms with their multiplicity), so the gradient kernel
    # stores each adjoint once: a long chain's gradient is derived and emulated, a shorter one's
    # compiled
    a, b = inputs(5)
    n = 1000
    g = hyb.compile_source(kernel_text(mixed_chain(n)[0])).k.grad()
    assert g.source.count("d_a[i] +=") == 0 and g.source.count("d_a[i] = ") == 1
    da, db = g.emulate(a, b, np.ones(5))
    wa, wb = chain_gradient(n, a, b)
    np.testing.assert_allclose(da, wa, rtol=1e-9)
    np.testing.assert_allclose(db, wb, rtol=1e-9)
    n = 60
    da, db = hyb.compile_source(kernel_text(mixed_chain(n)[0])).k.grad()(a, b, np.ones(5))
    wa, wb = chain_gradient(n, a, b)
    np.testing.assert_allclose(da, wa, rtol=1e-12)
    np.testing.assert_allclose(db, wb, rtol=1e-12)


def test_long_chain_compiled_on_a_thread():
    n = 3000
    text, reference = mixed_chain(n)
    got, errors = {}, []
    a, b = inputs()

    def work(name):
        try:
            k = hyb.compile_source(kernel_text(text), **EXACT).k
            got[name] = (k(a, b), k.emulate(a, b))
        except Exception as e:  # noqa: BLE001 (reported by the assertion below)
            errors.append(e)

    limit = sys.getrecursionlimit()
    threads = [threading.Thread(target=work, args=(j,)) for j in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    want = reference(a, b)
    for compiled, emulated in got.values():
        np.testing.assert_array_equal(compiled, want)
        np.testing.assert_array_equal(emulated, want)
    assert sys.getrecursionlimit() == limit  # raised only while the deep work ran


def test_recursion_limit_is_restored_after_a_deep_compile():
    limit = sys.getrecursionlimit()
    k = hyb.compile_source(kernel_text(" + ".join(["a[i]"] * 1000))).k
    assert k(np.ones(2), np.ones(2))[0] == 1000.0
    assert sys.getrecursionlimit() == limit
    seen = []
    # the work itself runs with the raised limit, on a thread with the stack for it
    deep.call(100_000, lambda: seen.append((sys.getrecursionlimit(), threading.current_thread().name)))
    assert seen == [(deep.LIMIT, "hyb-deep")]
    assert deep.call(1000, sys.getrecursionlimit) == deep.frames(1000) < deep.LIMIT  # as much as it needs
    assert sys.getrecursionlimit() == limit


def test_deep_call_passes_errors_and_values_back():
    def fail():
        raise hyb.HybridTypeError("bad", None, None)
    with pytest.raises(hyb.HybridTypeError, match="bad"):
        deep.call(100_000, fail)
    assert deep.call(100_000, lambda x: x + 1, 41) == 42
    assert deep.call(1, lambda: threading.current_thread().name) == threading.current_thread().name


def test_depth_of_a_chain():
    n = 500
    module = hyb.compile_source(kernel_text(" + ".join(["a[i]"] * n))).k.module
    # module, kernel, for, assign, then the chain's n - 1 additions and a subscript's name
    assert n <= deep.depth(module) <= n + 10


def test_long_chain_in_the_command_line_tool(tmp_path, capsys):
    from hyb.cli.main import main
    path = tmp_path / "long.hyb"
    path.write_text(kernel_text(" + ".join(["a[i]"] * 3000)))
    assert main(["check", str(path)]) == 0  # the linter, without a signature
    assert main(["check", str(path), "--args", "float64[4] float64[4]"]) == 0
    out = capsys.readouterr().out
    assert "1 kernel(s) checked without a signature: k" in out
    assert "kernel `k` checked and compiled for a=float64[4] b=float64[4]" in out


# ------------------------------------------------------------------ real nesting
def test_nesting_at_the_limit():
    # each bracket is a level, and so is the subscript `a[i]` inside them
    inside = parser.MAX_NESTING - 1
    k = hyb.compile_source(kernel_text("(" * inside + "a[i]" + ")" * inside)).k
    np.testing.assert_array_equal(k(np.ones(2), np.ones(2)), [1.0, 1.0])
    with pytest.raises(hyb.HybridSyntaxError) as info:
        hyb.compile_source(kernel_text("(" * (inside + 1) + "a[i]" + ")" * (inside + 1)))
    assert (info.value.line, info.value.col) == (4, len("        c[i] = ") + inside + 2)  # at `a[i]`
    assert (info.value.span.end_line, info.value.span.end_col) == (4, info.value.col + len("a[i]"))


def test_nested_brackets_past_the_limit():
    depth = 500
    src = kernel_text("(" * depth + "a[i]" + ")" * depth)
    with pytest.raises(hyb.HybridSyntaxError) as info:
        hyb.compile_source(src, filename="deep.hyb")
    e = info.value
    assert type(e) is hyb.HybridSyntaxError
    assert e.message == "expression nested too deeply to parse: more than 200 levels"
    # the innermost bracket at the limit: the 201st `(`, after `        c[i] = ` and 200 others
    assert (e.filename, e.line, e.col) == ("deep.hyb", 4, len("        c[i] = ") + 201)
    assert "chain `a + b + c + ...` counts as one level" in e.hint


def test_nested_calls_past_the_limit():
    src = kernel_text("abs(" * 300 + "a[i]" + ")" * 300)
    with pytest.raises(hyb.HybridSyntaxError) as info:
        hyb.compile_source(src)
    e = info.value
    assert e.message == "expression nested too deeply to parse: more than 200 levels"
    assert (e.line, e.col) == (4, len("        c[i] = ") + 200 * len("abs(") + 1)


def test_nested_subscripts_and_unary_minus_past_the_limit():
    for value, col in (("-" * 300 + "a[i]", len("        c[i] = ") + 201),
                       ("a[" * 300 + "i" + "]" * 300, len("        c[i] = ") + 2 * 200 + 1)):
        with pytest.raises(hyb.HybridSyntaxError) as info:
            hyb.compile_source(kernel_text(value))
        assert (info.value.line, info.value.col) == (4, col), value[:10]


@pytest.mark.parametrize("op", ["+", "and"])
def test_too_long_expression(op, monkeypatch):
    monkeypatch.setattr(parser, "MAX_LEVELS", 2_000)  # (the limit's own value only takes longer to reach)
    n = parser.MAX_LEVELS + 10
    with pytest.raises(hyb.HybridUnsupportedError) as info:
        hyb.compile_source(kernel_text(f" {op} ".join(["a[i]"] * n)))
    e = info.value
    assert e.message == f"expression too long: more than {parser.MAX_LEVELS:,} levels deep"
    assert (e.line, e.col) == (4, len("        c[i] = ") + 1)  # at the chain's first term


# ------------------------------------------------------------------ the parser's tables
GRAMMAR = parser._GRAMMAR


def fresh_parser(monkeypatch, folder=None, off=False):
    """The parser as a new process makes it, with hyb's cache folder ``folder``."""
    if off:
        monkeypatch.setenv("HYB_CACHE", "0")
    else:
        monkeypatch.delenv("HYB_CACHE", raising=False)
        monkeypatch.setenv("HYB_CACHE_DIR", str(folder))
    monkeypatch.setattr(parser, "tables_loaded_from", None)
    return parser._lark.__wrapped__()


def parses(p) -> bool:
    tree = p.parse("def k(a):\n    return a\n")
    return tree.children[0].data == "funcdef"


def test_tables_are_stored_then_loaded(monkeypatch, tmp_path):
    folder = tmp_path / "cache"
    p = fresh_parser(monkeypatch, folder)
    assert parses(p) and parser.tables_loaded_from is None
    files = [f for f in os.listdir(folder) if f.startswith("lark-")]
    assert len(files) == 1 and files[0].endswith(".tables")
    assert stat.S_IMODE(os.stat(folder / files[0]).st_mode) & 0o077 == 0
    p = fresh_parser(monkeypatch, folder)
    assert parses(p) and parser.tables_loaded_from == str(folder / files[0])


def test_tables_make_their_folders_private_whatever_the_umask(monkeypatch, tmp_path):
    folder = tmp_path / "a" / "b" / "cache"  # none of them there yet
    old = os.umask(0o022)
    try:
        assert parses(fresh_parser(monkeypatch, folder))
    finally:
        os.umask(old)
    for f in (tmp_path / "a", tmp_path / "a" / "b", folder):
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o700, f  # as the disk cache makes them


def test_tables_not_loaded_from_a_folder_others_can_write(monkeypatch, tmp_path):
    folder = tmp_path / "cache"
    fresh_parser(monkeypatch, folder)
    os.chmod(folder, 0o777)
    p = fresh_parser(monkeypatch, folder)
    assert parses(p) and parser.tables_loaded_from is None
    os.chmod(folder, 0o700)
    entry = next(folder.glob("lark-*.tables"))
    os.chmod(entry, 0o666)
    p = fresh_parser(monkeypatch, folder)
    assert parses(p) and parser.tables_loaded_from is None


def test_damaged_tables_are_built_again(monkeypatch, tmp_path):
    folder = tmp_path / "cache"
    fresh_parser(monkeypatch, folder)
    entry = next(folder.glob("lark-*.tables"))
    entry.write_bytes(entry.read_bytes()[:100])
    p = fresh_parser(monkeypatch, folder)
    assert parses(p) and parser.tables_loaded_from is None
    p = fresh_parser(monkeypatch, folder)  # written again, whole
    assert parses(p) and parser.tables_loaded_from == str(entry)


def test_no_tables_without_a_usable_cache(monkeypatch, tmp_path):
    p = fresh_parser(monkeypatch, off=True)
    assert parses(p) and parser.tables_loaded_from is None
    blocked = tmp_path / "a file"
    blocked.write_text("")
    p = fresh_parser(monkeypatch, blocked / "cache")  # a folder that cannot be made
    assert parses(p) and parser.tables_loaded_from is None
    assert os.listdir(tmp_path) == ["a file"]


def test_a_second_process_loads_the_tables(tmp_path):
    env = dict(os.environ, HYB_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("HYB_CACHE", None)
    script = textwrap.dedent("""
        import hyb
        from hyb.dsl import parser
        m = hyb.compile_source("def k(a):\\n    return a\\n")
        print(parser.tables_loaded_from)
    """)
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]
    (entry,) = (tmp_path / "cache").glob("lark-*.tables")
    assert runs[0].stdout.strip() == "None"
    assert runs[1].stdout.strip() == str(entry)
