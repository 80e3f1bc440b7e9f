import os
import tempfile

# Tests never read or write the user's kernel cache: each session has a fresh one.
os.environ["HYB_CACHE_DIR"] = tempfile.mkdtemp(prefix="hyb-test-cache-")

# ml_dtypes (the test extra) registers "bfloat16" with NumPy, which the dtype-parametrised suites
# name as a string (np.dtype("bfloat16"), a.astype("bfloat16")).  hyb itself imports it only when
# a kernel uses bfloat16.
try:
    import ml_dtypes  # noqa: F401
except ImportError:  # the bfloat16 tests skip (tests/dsl/test_bfloat16.py) or fail saying so
    pass
