"""The C part of hyb: the dispatcher of warm kernel calls (hyb/runtime/_fastcall.c).

Everything else is in pyproject.toml.  The extension is optional: where it does not build (no C
compiler), hyb installs without it and warm calls take the Python path.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("hyb.runtime._fastcall", ["hyb/runtime/_fastcall.c"], optional=True)])
