"""Type stub of the compiled twin: the same API as the pure-Python `rocketstore.format._codec_py`
(tests/test_twin_parity.py checks that both export the same names)."""

from rocketstore.format._codec_py import *  # noqa: F403
from rocketstore.format._codec_py import __all__ as __all__
