"""Every ```python block of README.md and docs/ runs, page by page in a fresh directory (blocks of
one page share one interpreter, as a reader runs them in order), and so do the README's
``rocketstore`` command lines. A block after ``<!-- no-run: reason -->`` is skipped; keep those
rare."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
_BLOCK = re.compile(r"(<!-- no-run:[^>]*-->\s*\n)?```(\w+)[^\n]*\n(.*?)\n```", re.S)


def blocks(page: pathlib.Path, language: str) -> list[str]:
    return [
        code
        for skip, lang, code in _BLOCK.findall(page.read_text(encoding="utf-8"))
        if lang == language and not skip
    ]


def _env(tmp_path) -> dict:
    env = dict(os.environ, ROCKETSTORE_HOME=str(tmp_path / "home"), PYTHONIOENCODING="utf-8")
    # the examples' tempfile.mkdtemp() stores go under tmp_path, which pytest removes (they
    # were left in /tmp: a 1 GiB sparse segment each)
    env["TMPDIR"] = str(tmp_path)
    package = pathlib.Path(__import__("rocketstore").__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(package), env.get("PYTHONPATH")]))
    return env


@pytest.mark.parametrize(
    "page", [p for p in PAGES if blocks(p, "python")], ids=lambda p: str(p.relative_to(ROOT))
)
def test_python_blocks_run(page, tmp_path):
    """Twice in the same directory, as a reader who runs a page again does."""
    script = "\n\n".join(blocks(page, "python"))
    for attempt in ("first", "second"):
        proc = subprocess.run(
            [sys.executable, "-c", script],
            cwd=tmp_path,
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, f"{page.name}, {attempt} run:\n{proc.stderr[-3000:]}"


@pytest.mark.parametrize(
    "page", [p for p in PAGES if blocks(p, "python")], ids=lambda p: str(p.relative_to(ROOT))
)
def test_python_blocks_type_check_strictly(page, tmp_path):
    """What a user's ``mypy --strict`` says of the examples, copied into their code."""
    api = pytest.importorskip("mypy.api")
    script = tmp_path / f"{page.stem}_example.py"
    script.write_text("\n\n".join(blocks(page, "python")), encoding="utf-8")
    stdout, stderr, status = api.run(["--strict", "--no-incremental", "--cache-dir", os.devnull, str(script)])
    assert status == 0, f"{page.relative_to(ROOT)}:\n{stdout}{stderr}"


def test_readme_command_lines_run(tmp_path):
    """The tour's store, then each ``rocketstore ...`` line of the README's bash blocks."""
    readme = ROOT / "README.md"
    subprocess.run(
        [sys.executable, "-c", "\n\n".join(blocks(readme, "python"))],
        cwd=tmp_path,
        env=_env(tmp_path),
        check=True,
        capture_output=True,
        timeout=300,
    )
    lines = [
        line.strip()
        for code in blocks(readme, "bash")
        for line in code.splitlines()
        if line.strip().startswith("rocketstore ")
    ]
    assert lines
    for line in lines:
        args = line.split()[1:]
        proc = subprocess.run(
            [sys.executable, "-m", "rocketstore", *args],
            cwd=tmp_path,
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, (line, proc.stderr)


def test_docs_never_cite_files_users_do_not_have():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert "../shared" not in text and "shared/spec" not in text, page


#: A section number cited in a comment or docstring: ``§1.6``, ``§14.1/7/8`` (14.1), ``§4.2).``
_CITED_SECTION = re.compile(r"§(\d+(?:\.\d+)*)")
#: A numbered heading of docs/format.md: ``## 1. CommitLog records``, ``### 1.6 The CRC32 property``
_NUMBERED_HEADING = re.compile(r"^#{2,6} (\d+(?:\.\d+)*)\.? ", re.M)
_CITING_SUFFIXES = {".py", ".pyi", ".pyx", ".pxi", ".pxd", ".h", ".c", ".md"}


def _cited_sections() -> dict[str, str]:
    """Every section number the code, the tests, the benchmarks and the docs cite, with the
    first place that cites it."""
    cited: dict[str, str] = {}
    sources = [ROOT / "README.md", ROOT / "ARCHITECTURE.md"]
    for folder in ("src", "cext", "bench", "tests", "docs"):
        sources += sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in _CITING_SUFFIXES)
    for path in sources:
        if not path.is_file() or path == ROOT / "docs" / "format.md":
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for number in _CITED_SECTION.findall(line):
                cited.setdefault(number, f"{path.relative_to(ROOT)}:{n}")
    return cited


def test_every_cited_section_is_a_heading_of_the_format_page():
    """A ``§x.y`` in a comment means section x.y of docs/format.md, which must have it."""
    cited = _cited_sections()
    assert "1.6" in cited  # the scan does find the references (the CRC32 property's, say)
    page = ROOT / "docs" / "format.md"
    headings = set(_NUMBERED_HEADING.findall(page.read_text(encoding="utf-8"))) if page.exists() else set()
    missing = {number: where for number, where in cited.items() if number not in headings}
    assert not missing, f"cited but not a heading of docs/format.md: {missing}"


_ISSUE_CITATION = re.compile(r"\bissue ?#?\d+", re.I)


def test_no_comment_cites_an_issue_number():
    """The tracker is not in the repository: a comment says its reason itself."""
    found = []
    for folder in ("src", "cext", "bench", "tests"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in _CITING_SUFFIXES and path.is_file():
                text = path.read_text(encoding="utf-8", errors="replace")
                found += [f"{path.relative_to(ROOT)}: {m.group()}" for m in _ISSUE_CITATION.finditer(text)]
    assert not found


_UNRELEASED_INSTALL = re.compile(r"""pip install ["']?rocketstore\b(?! @)""")


def test_no_page_or_message_installs_a_release_that_does_not_exist():
    """There is no release on an index yet: installs come from a clone or a git URL."""
    found = []
    for path in PAGES + sorted((ROOT / "src").rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _UNRELEASED_INSTALL.search(line) and "finds nothing" not in line:
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, found
