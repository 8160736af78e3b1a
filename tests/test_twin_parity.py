"""Each compiled module and its pure-Python twin export the same names (``__all__``), and each of
those names exists in both: the ``.pyi`` stubs of the compiled modules re-export the pure twins'
API, which holds only while this does."""

import importlib
import importlib.util
import inspect

import pytest

from rocketstore import _impl

TWINS = ("crc32", "codec", "scan", "store", "index")
#: Names only the compiled twin has: the point reads' front in one C call (the pure build's roles
#: call the careful paths, which read through the same kernels, instead of a copy of the front).
COMPILED_ONLY = {"codec": {"FastReads"}}


@pytest.mark.parametrize("twin", TWINS)
def test_both_twins_export_the_same_names(twin):
    if _impl.COMPILED is None:
        pytest.skip("the compiled modules are not built")
    compiled, pure = getattr(_impl.COMPILED, twin), getattr(_impl.PURE, twin)
    only = COMPILED_ONLY.get(twin, set())
    assert sorted(set(compiled.__all__) - only) == sorted(pure.__all__)
    assert all(hasattr(compiled, name) and not hasattr(pure, name) for name in only)
    for name in pure.__all__:
        assert hasattr(compiled, name) and hasattr(pure, name), name
        a, b = getattr(compiled, name), getattr(pure, name)
        assert callable(a) == callable(b), name
        if inspect.isfunction(b) and not inspect.isclass(b):
            try:
                sig = inspect.signature(a)
            except (TypeError, ValueError):  # a builtin without a text signature
                continue
            pure_params = [p.name for p in inspect.signature(b).parameters.values()]
            assert [p.name for p in sig.parameters.values()] == pure_params, name


@pytest.mark.parametrize("twin", TWINS)
def test_each_compiled_module_has_a_stub_naming_its_twin(twin):
    pure = getattr(_impl.PURE, twin).__name__  # rocketstore.<layer>._<twin>_py
    spec = importlib.util.find_spec(pure)
    stub = spec.origin.replace(f"_{twin}_py.py", f"_{twin}.pyi")
    with open(stub, encoding="utf-8") as f:
        assert f"from {pure} import *" in f.read()
