"""Which rocketstore the benchmarks measure: the installed package, never the checkout's ``src/``.

Every script in ``bench/`` calls :func:`require` before it imports rocketstore: nothing here puts
``src/`` on ``sys.path``, so what is timed is what ``pip install .`` (or ``pip install -e .``)
built, and a missing install is an error that says so rather than a silent pure-Python run.
:func:`header` is the line each script prints first: the build (compiled or pure Python, from
``rocketstore._impl``) and the CRC-32 path it uses (``rocketstore.format._crc32.IMPLEMENTATION``, or the
pure twin's ``"zlib"``).
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from importlib import metadata

INSTALL_HINT = (
    'install it first, from the checkout\'s root: pip install ".[bench]"   '
    "(or pip install -e . ; the peers are optional)"
)

#: rocketstore.format._crc32.IMPLEMENTATION (cext/crc32.c's path names, and the pure twin's) -> what it is
CRC32_KINDS = {
    "vpclmulqdq-avx512": "hardware: VPCLMULQDQ carry-less multiply, AVX-512",
    "pclmulqdq": "hardware: PCLMULQDQ carry-less multiply",
    "table": "software: compiled table lookup",
    "zlib": "software: zlib.crc32, the pure-Python build's",
}


def require(script: str) -> None:
    """Import the installed rocketstore, or exit (status 2) saying how to install it."""
    try:
        import rocketstore  # noqa: F401
        from rocketstore import _impl  # noqa: F401
    except ImportError as exc:
        print(
            f"{script}: rocketstore is not importable by {sys.executable} ({exc}).\n"
            f"The benchmarks measure the installed package, not src/: {INSTALL_HINT}",
            file=sys.stderr,
        )
        sys.exit(2)


def _installed() -> bool:
    """Whether rocketstore's distribution metadata is in one of this interpreter's site-packages
    (a regular or editable install), rather than reached through PYTHONPATH."""
    try:
        dist = metadata.distribution("rocketstore")
    except metadata.PackageNotFoundError:
        return False
    sites = site.getsitepackages() + [site.getusersitepackages()]
    sites += [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
    return os.path.realpath(str(dist.locate_file(""))) in {os.path.realpath(p) for p in sites}


def describe() -> dict:
    """The build in use: ``implementation`` ("c" or "py"), ``compiled``, ``build``, ``why_pure``,
    ``crc32_path``, ``crc32_kind``, ``version``, ``installed`` and ``location``."""
    import rocketstore
    from rocketstore import _impl

    default = _impl.DEFAULT
    why = ""
    if not default.compiled:
        if _impl.NO_EXTENSIONS:
            why = "ROCKETSTORE_NO_EXTENSIONS=1"
        else:
            why = f"the compiled modules did not import: {_impl.IMPORT_ERROR}"
    installed = _installed()
    ver = getattr(rocketstore, "__version__", "?")
    crc = default.crc32.IMPLEMENTATION
    return dict(
        implementation=default.name,
        compiled=bool(default.compiled),
        build="compiled" if default.compiled else "pure Python",
        why_pure=why,
        crc32_path=crc,
        crc32_kind=CRC32_KINDS.get(crc, "?"),
        version=ver,
        installed=installed,
        location=os.path.dirname(os.path.abspath(rocketstore.__file__)),
    )


def header(info: dict | None = None) -> str:
    """One line: which build was measured, its CRC-32 path, and where it was imported from."""
    d = info or describe()
    line = (
        f"rocketstore {d['version']}: {d['build']} build [{d['implementation']}]"
        + (f" ({d['why_pure']})" if d["why_pure"] else "")
        + f", CRC32 path {d['crc32_path']} ({d['crc32_kind']}); imported from {d['location']}"
    )
    if not d["installed"]:
        line += " (NOT an installed package: found through sys.path/PYTHONPATH)"
    return line
