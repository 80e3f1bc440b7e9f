"""Every fenced code block of README.md and docs/ runs (the conventions are in blocks.py)."""
import os

import pytest

from tests.docs import blocks as B

_KNOWN = ("skip", "output not compared", "exit", "rejected", "needs")
_CASES = [b for page in B.pages() for b in B.blocks(page) if b.lang]  # no language: a figure
_PAGES: dict = {}  # page -> (working folder, namespace): the blocks of a page share them, in order


def _page(block, tmp_path_factory):
    if block.page not in _PAGES:
        work = str(tmp_path_factory.mktemp("docs-page"))
        os.symlink(os.path.join(B.ROOT, "examples"), os.path.join(work, "examples"))
        _PAGES[block.page] = (work, {"__name__": "__docs__"})
    return _PAGES[block.page]


@pytest.mark.parametrize("block", _CASES, ids=[b.where for b in _CASES])
def test_block(block, tmp_path_factory, monkeypatch):
    for m in block.marks:
        assert m.startswith(_KNOWN), f"{block.where}: unknown docs-test mark {m!r}"
    if block.mark("skip") is not None:
        reason = block.mark("skip")
        assert reason.startswith("(") and reason.endswith(")"), f"{block.where}: say why a block is skipped"
        pytest.skip(f"not run: {reason[1:-1]}")
    for need in block.needs():
        why = B.missing(need)
        if why:
            pytest.skip(f"{block.where} needs {need}: {why}")
    work, namespace = _page(block, tmp_path_factory)
    monkeypatch.chdir(work)
    if block.lang == "python":
        _python(block, work, namespace)
    elif block.lang == "hyb":
        _hyb(block, work)
    elif block.lang in ("console", "text", "sh"):
        _commands(block, work)
    else:
        pytest.fail(f"{block.where}: a ```{block.lang or '(no language)'} block must be marked "
                    "<!-- docs-test: skip (REASON) --> or be one the tests run")


def _python(block, work, namespace):
    path = os.path.join(work, f"block_{block.line}.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(block.text)
    exec(compile(block.text, path, "exec"), namespace)  # noqa: S102 - the documentation's own examples


def _hyb(block, work):
    import hyb
    if block.title:
        with open(os.path.join(work, block.title), "w", encoding="utf-8") as f:
            f.write(block.text)
    rejected = block.mark("rejected")
    name = block.title or block.where
    if rejected:
        error, _, spec = rejected.partition(" for ")
        with pytest.raises(getattr(hyb, error)):
            module = hyb.compile_source(block.text, filename=name)
            if spec:  # an error of type checking: compile the (only) kernel for this signature
                (kernel,) = module.kernels.values()
                kernel.compile(*[_array(item) for item in spec.split()])
    else:
        hyb.compile_source(block.text, filename=name)


def _array(item: str):
    """``float32[4,8]`` -> an array of ones of that dtype and shape."""
    import numpy as np
    dtype, _, dims = item.partition("[")
    return np.ones(tuple(int(d) for d in dims.rstrip("]").split(",") if d), dtype)


def _commands(block, work):
    cmds = B.commands(block)
    if not cmds:
        pytest.fail(f"{block.where}: a ```{block.lang} block runs `$ hyb ...` commands or is marked skip")
    compare = block.mark("output not compared") is None and block.lang != "sh"
    exit_mark = block.mark("exit")
    for k, cmd in enumerate(cmds):
        status, printed = B.run(cmd)
        want = int(exit_mark) if exit_mark is not None and k == len(cmds) - 1 else 0
        assert status == want, (f"{block.where}: `hyb {' '.join(cmd.argv)}` exited with {status}, "
                                f"the page says {want}; it printed:\n{printed}")
        if compare:
            actual = B.normalise(printed, work)
            assert B.matches(cmd.expected, actual), (
                f"{block.where}: `hyb {' '.join(cmd.argv)}` printed\n" + "\n".join(actual)
                + "\n\nwhere the page shows\n" + "\n".join(cmd.expected))
