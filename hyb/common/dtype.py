"""``hyb.common.dtype``: MindSpore's ``mindspore.common.dtype`` (``mstype``) module path; the names
of :mod:`hyb.dtype` (the same objects)."""
from ..dtype import *  # noqa: F401,F403
from ..dtype import __all__, dtype_to_nptype  # noqa: F401
from ..dtype import __getattr__  # noqa: F401  (bfloat16, made when first read)
