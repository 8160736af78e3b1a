"""CRC-32 (BODYCRC): both twins equal zlib.crc32 on every input, and so does every compiled C path."""

import mmap
import random
import threading
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

try:
    from rocketstore.format import _crc32 as compiled_crc32
except ImportError:  # pragma: no cover - depends on the build
    compiled_crc32 = None

from rocketstore import _impl
from rocketstore.format import _crc32_py

PATHS = ("table", "pclmulqdq", "vpclmulqdq-avx512")
SEED = 20240521  # fixed so failures reproduce; printed in every assertion message that uses it
UINT32 = st.integers(min_value=0, max_value=0xFFFFFFFF)
# The fixtures used with @given only select a module; nothing in them is reset per example.
PROPERTY = settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Short inputs shrink well; long ones (up to past 64 KiB) reach every SIMD loop and the nogil path.
LONG_BYTES = st.builds(
    lambda seed, size: random.Random(seed).randbytes(size),
    st.integers(min_value=0, max_value=2**32),
    st.integers(min_value=0, max_value=70_000),
)
ANY_BYTES = st.one_of(st.binary(max_size=2048), LONG_BYTES)

# Every length that crosses a fold width (16/64/256 bytes) or the SIMD threshold, and the nogil limit.
BOUNDARY_LENGTHS = sorted(
    set(range(0, 1101))
    | {
        n + d
        for n in (2048, 4096, 8192, 65536, 1 << 20)
        for d in (-65, -64, -17, -16, -1, 0, 1, 15, 16, 63, 64)
    }
)


def _random_bytes(size, seed=SEED):
    return random.Random(seed).randbytes(size)


@pytest.fixture
def crc(impl):
    """The crc32 twin of the implementation under test."""
    return impl.crc32


@pytest.fixture(scope="module")
def compiled():
    """The compiled module imported directly, usable before the other compiled twins exist."""
    if compiled_crc32 is None:
        if _impl.REQUIRE_EXTENSIONS:
            pytest.fail("rocketstore.format._crc32 is required but did not import")
        pytest.skip("rocketstore.format._crc32 is not built")
    return compiled_crc32


@pytest.fixture(scope="module", params=PATHS)
def path(request, compiled):
    """Each C path this CPU can run (the others skip)."""
    try:
        compiled._crc32_with(b"", request.param)
    except ValueError:
        pytest.skip(f"this CPU cannot run the {request.param} path")
    return request.param


# --- both twins ------------------------------------------------------------------------------


def test_known_vectors(crc):
    assert crc.crc32(b"Hello world") == 0x8BD69E52
    assert crc.masked_crc32(b"Hello world") == 198614610
    assert crc.crc32(b"Hello World") == 0x4A17B156
    assert crc.crc32(b"") == 0
    assert crc.masked_crc32(b"") == 0
    assert crc.crc32(b"123456789") == 0xCBF43926  # the CRC-32/ISO-HDLC check value


def test_empty_input_returns_start_value(crc):
    for value in (0, 1, 0x12345678, 0xFFFFFFFF):
        assert crc.crc32(b"", value) == value


def test_value_accepted_by_keyword_and_as_bool(crc):
    assert crc.crc32(b"abc", value=7) == zlib.crc32(b"abc", 7)
    assert crc.crc32(b"abc", True) == zlib.crc32(b"abc", 1)


def test_implementation_names_the_path_in_use(impl):
    if impl.compiled:
        assert impl.crc32.IMPLEMENTATION in PATHS
    else:
        assert impl.crc32.IMPLEMENTATION == "zlib"


@PROPERTY
@given(data=ANY_BYTES, value=UINT32)
def test_equals_zlib_for_any_bytes_and_start_value(crc, data, value):
    assert crc.crc32(data, value) == zlib.crc32(data, value)
    assert crc.masked_crc32(data) == zlib.crc32(data) & 0x7FFFFFFF


@PROPERTY
@given(data=ANY_BYTES, value=UINT32, cuts=st.lists(st.floats(0, 1), max_size=4))
def test_split_computation_equals_one_shot(crc, data, value, cuts):
    bounds = sorted({0, len(data), *(int(c * len(data)) for c in cuts)})
    running = value
    for start, end in zip(bounds, bounds[1:]):
        running = crc.crc32(data[start:end], running)
    assert running == crc.crc32(data, value)


def test_every_boundary_length_equals_zlib(crc):
    rng = random.Random(SEED)
    buf = memoryview(_random_bytes(max(BOUNDARY_LENGTHS) + 64))
    for n in BOUNDARY_LENGTHS:
        offset = n % 61  # walk the start through every alignment
        value = rng.getrandbits(32)
        chunk = buf[offset : offset + n]
        assert crc.crc32(chunk, value) == zlib.crc32(chunk, value), f"n={n} offset={offset} seed={SEED}"


def test_unaligned_memoryview_slices_equal_zlib(crc):
    buf = memoryview(_random_bytes(70_000))
    for offset in range(64):
        for n in (63, 64, 65, 255, 256, 257, 1000, 4096, 65537):
            chunk = buf[offset : offset + n]
            assert crc.crc32(chunk, offset) == zlib.crc32(chunk, offset), f"n={n} offset={offset} seed={SEED}"


@pytest.mark.parametrize(
    "make",
    [
        bytearray,
        memoryview,
        lambda b: memoryview(bytearray(b)),
        lambda b: np.frombuffer(b, dtype=np.uint8),
        lambda b: np.frombuffer(b, dtype=np.uint32),  # item size 4: checksummed as raw bytes
        lambda b: np.frombuffer(b, dtype=np.uint8).reshape(8, -1),  # 2-D, C-contiguous
        lambda b: memoryview(b).cast("I"),
    ],
    ids=["bytearray", "memoryview", "memoryview-rw", "numpy-u8", "numpy-u32", "numpy-2d", "memoryview-cast"],
)
def test_accepts_any_c_contiguous_buffer(crc, make):
    for size in (64, 4096, 65536 + 64):  # below and above the GIL-release threshold
        raw = _random_bytes(size)
        assert crc.crc32(make(raw)) == zlib.crc32(raw)
        assert crc.crc32(make(raw), 99) == zlib.crc32(raw, 99)
        assert crc.masked_crc32(make(raw)) == zlib.crc32(raw) & 0x7FFFFFFF


def test_accepts_mmap(crc, tmp_path):
    raw = _random_bytes(100_000)
    segment = tmp_path / "00000000000000000000"
    segment.write_bytes(raw)
    with open(segment, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert crc.crc32(mapped) == zlib.crc32(raw)
        assert crc.crc32(memoryview(mapped)[12345:]) == zlib.crc32(raw[12345:])


def _raised(fn, *args):
    with pytest.raises(Exception) as info:
        fn(*args)
    return info.value


@pytest.mark.parametrize(
    "bad_data",
    [
        "Hello world",
        None,
        42,
        [1, 2, 3],
        np.arange(16, dtype=np.uint8).reshape(4, 4)[:, 0],
        memoryview(b"abcdefgh")[::2],
    ],
    ids=["str", "None", "int", "list", "numpy-strided", "memoryview-strided"],
)
def test_rejects_non_contiguous_or_non_buffer_data_like_zlib(crc, bad_data):
    expected = _raised(zlib.crc32, bad_data)
    for fn in (crc.crc32, crc.masked_crc32):
        got = _raised(fn, bad_data)
        assert type(got) is type(expected)
        assert str(got) == str(expected)


@pytest.mark.parametrize("bad_value", [-1, 2**32, 2**64, -(2**70)])
def test_rejects_start_value_outside_uint32(crc, bad_value):
    with pytest.raises(ValueError, match=r"value must be in 0\.\.2\*\*32-1"):
        crc.crc32(b"abc", bad_value)


@pytest.mark.parametrize("bad_value", [1.5, "1", None, b"\x01"])
def test_rejects_non_integer_start_value(crc, bad_value):
    with pytest.raises(TypeError):
        crc.crc32(b"abc", bad_value)


def test_both_twins_raise_the_same_messages(crc):
    for args in ((b"abc", -1), (b"abc", 2**32), (b"abc", 1.5), ("abc", 0)):
        got, expected = _raised(crc.crc32, *args), _raised(_crc32_py.crc32, *args)
        assert (type(got), str(got)) == (type(expected), str(expected))


def test_compiled_implementation_bundles_the_compiled_crc32(impl):
    if impl.compiled:
        assert impl.crc32 is compiled_crc32
    else:
        assert impl.crc32 is _crc32_py


# --- the compiled module, imported directly ----------------------------------------------------


def test_compiled_known_vectors(compiled):
    assert compiled.crc32(b"Hello world") == 0x8BD69E52
    assert compiled.masked_crc32(b"Hello world") == 198614610
    assert compiled.crc32(b"Hello World") == 0x4A17B156
    assert compiled.crc32(b"") == 0


def test_compiled_reports_a_known_path(compiled):
    assert compiled.IMPLEMENTATION in PATHS
    # The path in use is one this CPU can run, and the helper accepts it.
    assert compiled._crc32_with(b"Hello world", compiled.IMPLEMENTATION) == 0x8BD69E52


@PROPERTY
@given(data=ANY_BYTES, value=UINT32)
def test_compiled_equals_zlib(compiled, data, value):
    assert compiled.crc32(data, value) == zlib.crc32(data, value)


def test_unknown_path_is_rejected(compiled):
    with pytest.raises(ValueError, match="unknown or not supported"):
        compiled._crc32_with(b"abc", "crc32c-sse42")


def test_path_table_always_available(compiled):
    assert compiled._crc32_with(b"Hello world", "table") == 0x8BD69E52


@PROPERTY
@given(data=ANY_BYTES, value=UINT32)
def test_each_path_equals_zlib_for_any_bytes_and_start_value(path, data, value):
    assert compiled_crc32._crc32_with(data, path, value) == zlib.crc32(data, value)


def test_each_path_equals_zlib_at_every_boundary_length(path):
    rng = random.Random(SEED)
    buf = memoryview(_random_bytes(max(BOUNDARY_LENGTHS) + 64))
    for n in BOUNDARY_LENGTHS:
        for offset in (0, 1, 15, n % 64):
            value = rng.getrandbits(32)
            chunk = buf[offset : offset + n]
            assert compiled_crc32._crc32_with(chunk, path, value) == zlib.crc32(chunk, value), (
                f"path={path} n={n} offset={offset} seed={SEED}"
            )


def test_each_path_equals_zlib_at_every_alignment(path):
    buf = memoryview(_random_bytes(5000))
    for offset in range(64):
        for n in (64, 100, 256, 300, 1024, 4000):
            chunk = buf[offset : offset + n]
            assert compiled_crc32._crc32_with(chunk, path, 0xFFFFFFFF) == zlib.crc32(chunk, 0xFFFFFFFF)


def test_each_path_handles_extreme_bit_patterns(path):
    for fill in (0x00, 0xFF, 0x80, 0x01):
        for n in (64, 256, 4096, 65536):
            data = bytes([fill]) * n
            for value in (0, 0xFFFFFFFF, 0x80000000, 1):
                assert compiled_crc32._crc32_with(data, path, value) == zlib.crc32(data, value)


def test_compiled_is_correct_from_many_threads(compiled):
    """Large inputs run without the GIL; concurrent calls must not disturb one another."""
    buffers = [_random_bytes(1 << 20, seed=SEED + i) for i in range(4)]
    expected = [zlib.crc32(b) for b in buffers]
    results = {}

    def work(i):
        results[i] = [compiled.crc32(buffers[i]) for _ in range(20)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        assert results[i] == [expected[i]] * 20
