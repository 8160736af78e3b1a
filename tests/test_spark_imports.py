"""``rocketstore.spark`` imports without PySpark (the Arrow readers executors run need only
pyarrow); using a Spark class without it is one ImportError naming the extra to install."""

import subprocess
import sys
import textwrap


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


def test_the_package_imports_without_pyspark_and_register_says_what_is_missing():
    proc = _run("""
        import sys
        sys.modules["pyspark"] = None           # as if PySpark were not installed
        import rocketstore.spark as rs
        assert rs.FORMAT_NAME == "rocketstore" and "topic STRING" in rs.SCHEMA_DDL
        assert callable(rs.read_queue_range) and callable(rs.arrow_schema)
        try:
            rs.register(object())
        except ImportError as exc:
            print("ImportError:", exc)
        else:
            raise SystemExit("register() worked without pyspark")
        try:
            rs.no_such_name
        except AttributeError:
            print("AttributeError")
    """)
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'pyspark>=4.0' pyarrow" in proc.stdout and "AttributeError" in proc.stdout


def test_importing_rocketstore_does_not_import_pyspark():
    proc = _run("""
        import sys, rocketstore, rocketstore.spark, rocketstore.cli
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j")))
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
