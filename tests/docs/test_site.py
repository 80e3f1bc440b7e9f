"""The documentation site builds without a warning, and README's links lead somewhere."""
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from tests.docs.blocks import ROOT


def test_site_builds_strictly(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        try:
            found = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            found = None
        if found is None:
            pytest.skip(f"{module} is not installed (pip install -e \".[docs]\")")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    # --strict: a broken link or anchor (mkdocs.yml's validation settings), a page outside the nav
    # or a docstring mkdocstrings cannot read fails the build
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "-f", os.path.join(ROOT, "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").exists()
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("hyb.compile_source", "hyb.Kernel", "hyb.HybridError", "hyb.ops.Custom", "hyb.torch.op", "hyb.jax.op"):
        assert name in api, f"the Python API page has no entry for {name} (mkdocstrings)"


def test_readme_links_resolve():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in links if not re.match(r"[a-z]+:", t)]
    assert local, "README links to the documentation's pages"
    missing = [t for t in local if not os.path.exists(os.path.join(ROOT, t))]
    assert not missing, f"README links to files that do not exist: {missing}"


def test_the_front_page_is_the_readme():
    """docs/index.md is README.md with the links made relative to docs/."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    with open(os.path.join(ROOT, "docs", "index.md"), encoding="utf-8") as f:
        index = f.read()
    assert re.sub(r"\]\(docs/", "](", readme) == index


def test_the_table_of_rejected_constructs_is_what_the_compiler_says():
    from tests.docs import rejected_table
    with open(rejected_table.PAGE, encoding="utf-8") as f:
        page = f.read()
    assert rejected_table.page_table(page) == rejected_table.table(), \
        "docs/reference/language.md: run `python -m tests.docs.rejected_table --write`"
