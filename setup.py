"""Build the compiled hot paths in cext/ as rocketstore._<name> extension modules.

Environment switches (read here only):

* ``ROCKETSTORE_NO_EXTENSIONS=1`` - build a pure-Python package (no compiler needed).
* ``ROCKETSTORE_DEBUG=1``         - ``-O0 -g`` and Cython line tracing off, for gdb.
* ``ROCKETSTORE_SANITIZE=1``      - AddressSanitizer + UndefinedBehaviorSanitizer build
  (``-fsanitize=address,undefined``; ``ROCKETSTORE_ASAN=1`` is an older name for it). Build it
  apart from the dev build (``-t build/tmp_asan``) and run the tests with
  ``LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1``: the interpreter itself is not instrumented,
  so the ASan runtime must be loaded first.
* ``ROCKETSTORE_ONLY=_crc32,...`` - build only the named extensions (development shortcut).
"""

import os
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _flag(name):
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def _extensions():
    if _flag("ROCKETSTORE_NO_EXTENSIONS"):
        return []
    from Cython.Build import cythonize

    if sys.platform == "win32":
        cflags = ["/O2"]
    elif _flag("ROCKETSTORE_DEBUG"):
        cflags = ["-O0", "-g3", "-Wall", "-Wextra", "-Wno-unused-function", "-Wno-unused-parameter"]
    else:
        cflags = ["-O3", "-Wall", "-Wextra", "-Wno-unused-function", "-Wno-unused-parameter"]
    ldflags = []
    if _flag("ROCKETSTORE_SANITIZE") or _flag("ROCKETSTORE_ASAN"):
        sanitizers = "-fsanitize=address,undefined"
        cflags += [sanitizers, "-fno-omit-frame-pointer", "-g"]
        ldflags += [sanitizers]
    libraries = [] if sys.platform == "win32" else ["pthread"]

    # name -> sources; crc32.c is linked into every module that checksums.
    modules = {
        "_crc32": ["cext/_crc32.pyx", "cext/crc32.c"],
        "_codec": ["cext/_codec.pyx", "cext/crc32.c"],
        "_store": ["cext/_store.pyx", "cext/crc32.c", "cext/flusher.c"],
        "_index": ["cext/_index.pyx"],
    }
    only = [m for m in os.environ.get("ROCKETSTORE_ONLY", "").split(",") if m]
    exts = []
    for name, sources in modules.items():
        if only and name not in only:
            continue
        exts.append(
            Extension(
                "rocketstore." + name,
                sources=sources,
                include_dirs=["cext"],
                depends=[os.path.join("cext", f) for f in os.listdir(os.path.join(HERE, "cext")) if f.endswith((".h", ".pxd"))],
                extra_compile_args=cflags,
                extra_link_args=ldflags,
                libraries=libraries,
            )
        )
    return cythonize(
        exts,
        build_dir="build/cython",
        compiler_directives={
            "language_level": 3,
            "embedsignature": True,
            "binding": False,
        },
        quiet=True,
    )


setup(ext_modules=_extensions())
