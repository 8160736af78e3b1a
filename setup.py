"""Build the compiled hot paths in cext/ as rocketstore._<name> extension modules.

Environment switches (read here only):

* ``ROCKETSTORE_NO_EXTENSIONS=1`` - build a pure-Python package (no compiler needed). Without a
  working compiler the build falls back to it by itself, with a warning, unless
* ``ROCKETSTORE_REQUIRE_EXTENSIONS=1`` - a failed compile fails the build (CI and wheels use it).
* ``ROCKETSTORE_DEBUG=1``         - ``-O0 -g`` and Cython line tracing off, for gdb.
* ``ROCKETSTORE_SANITIZE=1``      - AddressSanitizer + UndefinedBehaviorSanitizer build
  (``-fsanitize=address,undefined``; ``ROCKETSTORE_ASAN=1`` is an older name for it). Build it
  apart from the dev build (``-t build/tmp_asan``) and run the tests with
  ``LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1``: the interpreter itself is not instrumented,
  so the ASan runtime must be loaded first.
* ``ROCKETSTORE_DEBUG_HOOKS=1``   - compile the C test seams (``rocketstore.log._store._debug_fail_syncs``:
  make the flush thread's msync fail), which tests/test_flush_failure.py uses; .ci/run builds
  them once beside the release build.
* ``ROCKETSTORE_ONLY=_crc32,...`` - build only the named extensions (development shortcut).
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

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
        # Release: no debug info (the interpreter's CFLAGS carry -g) and stripped modules: a
        # wheel's .so files are 1.1 MB instead of 7.5 MB. ROCKETSTORE_DEBUG=1 keeps them.
        cflags = ["-O3", "-g0", "-Wall", "-Wextra", "-Wno-unused-function", "-Wno-unused-parameter"]
    ldflags = []
    if not (_flag("ROCKETSTORE_DEBUG") or _flag("ROCKETSTORE_SANITIZE") or _flag("ROCKETSTORE_ASAN")):
        if sys.platform.startswith("linux"):
            ldflags.append("-Wl,--strip-all")
        elif sys.platform == "darwin":
            ldflags.append("-Wl,-S")
    if _flag("ROCKETSTORE_SANITIZE") or _flag("ROCKETSTORE_ASAN"):
        sanitizers = "-fsanitize=address,undefined"
        cflags += [sanitizers, "-fno-omit-frame-pointer", "-g"]
        ldflags += [sanitizers]
    libraries = [] if sys.platform == "win32" else ["pthread"]
    # ROCKETSTORE_DEBUG_HOOKS=1: test seams in the C code (rocketstore.log._store._debug_fail_syncs)
    macros = [("RS_DEBUG_HOOKS", "1")] if _flag("ROCKETSTORE_DEBUG_HOOKS") else []

    # module (under rocketstore, in its layer's folder) -> sources; crc32.c is linked into every
    # module that checksums.
    modules = {
        "format._crc32": ["cext/_crc32.pyx", "cext/crc32.c"],
        "format._codec": ["cext/_codec.pyx", "cext/crc32.c"],
        "format._scan": ["cext/_scan.pyx", "cext/crc32.c"],
        "log._store": ["cext/_store.pyx", "cext/crc32.c", "cext/flusher.c"],
        "queues._index": ["cext/_index.pyx"],
        "_facade": ["cext/_facade.c"],  # plain C: MessageStore's hot calls, passed to its role
    }
    only = [m for m in os.environ.get("ROCKETSTORE_ONLY", "").split(",") if m]
    exts = []
    for name, sources in modules.items():
        if only and name.rsplit(".", 1)[-1] not in only:
            continue
        exts.append(
            Extension(
                "rocketstore." + name,
                sources=sources,
                include_dirs=["cext"],
                depends=[
                    os.path.join("cext", f)
                    for f in os.listdir(os.path.join(HERE, "cext"))
                    if f.endswith((".h", ".pxd"))
                ],
                extra_compile_args=cflags,
                define_macros=macros,
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


class _OptionalBuildExt(build_ext):
    """Build the extensions; when one cannot be compiled (no compiler, no Python headers), leave
    it out and say so: the package then runs on its pure-Python twins, as under
    ROCKETSTORE_NO_EXTENSIONS=1. ROCKETSTORE_REQUIRE_EXTENSIONS=1 makes that an error."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # no compiler at all: the build_ext step itself fails
            self._fall_back(exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # CompileError, LinkError, a missing compiler binary
            self._fall_back(exc, ext.name)

    def _fall_back(self, exc, name="the compiled extensions"):
        if _flag("ROCKETSTORE_REQUIRE_EXTENSIONS"):
            raise
        message = (
            f"rocketstore: could not build {name} ({type(exc).__name__}: {exc}); "
            "installing the pure-Python implementation, which is correct but several times "
            "slower. Install a C compiler and the Python headers and reinstall for the "
            "compiled one; set ROCKETSTORE_NO_EXTENSIONS=1 to skip this attempt, or "
            "ROCKETSTORE_REQUIRE_EXTENSIONS=1 to make it an error."
        )
        bar = "*" * 78
        sys.stderr.write(f"\n{bar}\n{message}\n{bar}\n\n")
        import warnings

        warnings.warn(message, stacklevel=1)


setup(ext_modules=_extensions(), cmdclass={"build_ext": _OptionalBuildExt})
