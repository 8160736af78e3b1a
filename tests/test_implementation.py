"""Guard tests: the implementation the environment asks for is the one that loaded."""

import pytest

from rocketstore import _impl


def test_required_extensions_really_loaded():
    if not _impl.REQUIRE_EXTENSIONS:
        pytest.skip("ROCKETSTORE_REQUIRE_EXTENSIONS=1 is not set: nothing to check (.ci/run sets it)")
    assert _impl.COMPILED is not None
    assert _impl.DEFAULT is _impl.COMPILED
    for twin in _impl._TWINS:
        module = getattr(_impl.COMPILED, twin)
        assert module.__file__.endswith((".so", ".pyd")), module.__file__


def test_no_extensions_forces_the_pure_twins():
    if not _impl.NO_EXTENSIONS:
        pytest.skip(
            "ROCKETSTORE_NO_EXTENSIONS=1 is not set: nothing to check (.ci/run's second pass sets it)"
        )
    assert _impl.COMPILED is None
    assert _impl.DEFAULT is _impl.PURE


def test_pure_twins_are_python_modules():
    for twin in _impl._TWINS:
        assert getattr(_impl.PURE, twin).__file__.endswith(".py")
