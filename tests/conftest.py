"""Shared fixtures: every twin-aware test runs against the compiled (``c``) and pure (``py``) twins."""

import os
import pathlib

import pytest

from rocketstore import _impl

SHARED = pathlib.Path(__file__).resolve().parents[1].parent / "shared"
JAVA_STORE = SHARED / "testdata" / "rocketmq-4.x-store"


@pytest.fixture(params=["c", "py"])
def impl(request):
    """The implementation under test: a bundle of twin modules (``impl.crc32``, ``impl.codec``, ...)."""
    if request.param == "c" and _impl.COMPILED is None:
        if _impl.REQUIRE_EXTENSIONS:
            pytest.fail(f"compiled modules required but missing: {_impl.IMPORT_ERROR}")
        pytest.skip("compiled modules not built" if not _impl.NO_EXTENSIONS else "ROCKETSTORE_NO_EXTENSIONS=1")
    return _impl.get(request.param)


@pytest.fixture
def java_store():
    """The store directory written by Java RocketMQ 4.x (skips when ../shared is absent)."""
    if not (JAVA_STORE / "commitlog" / "00000000000000000000").is_file():
        pytest.skip("../shared/testdata is not present in this checkout")
    return JAVA_STORE
