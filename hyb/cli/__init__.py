"""The ``hyb`` command line: ``hyb check | compile | run | grad | aot | demo | bench``.

``main`` (the console script) is in :mod:`hyb.cli.main`; ``python -m hyb.cli`` runs it too."""
from .main import main

__all__ = ["main"]
