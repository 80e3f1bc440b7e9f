import os
import shutil
import tempfile

# Tests never read or write the user's kernel cache: each test process has a fresh one of its own.
# Under pytest-xdist every worker imports this file and so gets its own directory (the workers
# never share cache entries, whatever tests run beside them); it is removed when the process ends.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
_CACHE_DIR = tempfile.mkdtemp(prefix=f"hyb-test-cache-{_WORKER}-")
os.environ["HYB_CACHE_DIR"] = _CACHE_DIR
# Parallel code runs on its threads however busy the test workers keep the machine (a busy machine
# would otherwise run every call on one thread: hyb.runtime.busy); tests/runtime/test_busy.py
# turns the check on where it tests it.
os.environ["HYB_ADAPT_THREADS"] = "0"

# ml_dtypes (the test extra) registers "bfloat16" with NumPy, which the dtype-parametrised suites
# name as a string (np.dtype("bfloat16"), a.astype("bfloat16")).  hyb itself imports it only when
# a kernel uses bfloat16.
try:
    import ml_dtypes  # noqa: F401
except ImportError:  # the bfloat16 tests skip (tests/dsl/test_bfloat16.py) or fail saying so
    pass


def pytest_unconfigure(config):
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)
