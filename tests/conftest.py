import os
import tempfile

# Tests never read or write the user's kernel cache: each session has a fresh one.
os.environ["HYB_CACHE_DIR"] = tempfile.mkdtemp(prefix="hyb-test-cache-")
