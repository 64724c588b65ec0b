"""The documentation site (``docs/``, built in CI by ``python -m sphinx -W -b html docs docs/_build/html``).

These checks run without building the site (the build takes minutes and runs in ``.ci/run``):

* no reference a reader cannot follow (``shared/``, "note §", "[C]", "[code]") in the code or the pages;
* the API reference's autosummary generation reaches every public module of ``zoo`` and ``guides``;
* every model family has a page that shows each of its registry entries, and every committed result table
  is shown by a page; every page is in a toctree;
* the helpers of ``docs/conf.py`` and ``docs/_ext/zoo_docs.py`` do what the pages rely on, tested on inputs
  they must reject or rewrite;
* ``zoo list`` prints references a user can look up; the README, CI and the ``[docs]`` extra name the build.
"""

from __future__ import annotations

import importlib.util
import pkgutil
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PRIVATE = re.compile(r"shared/|note §|\[C\]|\[code\]")
BUILD_COMMAND = "python -m sphinx -W -b html docs docs/_build/html"
GENERATED = ("_build", "api/generated", "results/generated")


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _needs_sphinx() -> None:
    pytest.importorskip("sphinx", reason='the docs tools are the [docs] extra: pip install -e ".[docs]"')


@pytest.fixture(scope="module")
def ext():
    _needs_sphinx()
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        yield _load("zoo_docs", DOCS / "_ext" / "zoo_docs.py")
    finally:
        sys.path.remove(str(DOCS / "_ext"))


def _readable():
    """``docs/conf.py``'s ``readable`` without running the module (which copies files into ``docs/``)."""
    source = (DOCS / "conf.py").read_text()
    start = source.index("# The papers behind")
    end = source.index("def _write_if_changed")
    namespace: dict = {"re": re}
    exec(compile(source[start:end], "conf.py", "exec"), namespace)  # noqa: S102 - the project's own file
    return namespace["readable"]


def _pages() -> list[Path]:
    return [
        p
        for p in DOCS.rglob("*.md")
        if not any(p.relative_to(DOCS).as_posix().startswith(g) for g in GENERATED)
    ]


# ------------------------------------------------------------------------------------------------------
# no private references


def test_no_private_references_in_code_and_pages():
    files = [*(ROOT / "zoo").rglob("*.py"), *(ROOT / "guides").rglob("*.py"), *_pages()]
    files += [DOCS / "conf.py", DOCS / "_ext" / "zoo_docs.py"]
    hits = [
        f"{f.relative_to(ROOT)}:{i}: {line.strip()}"
        for f in files
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if PRIVATE.search(line) and "PRIVATE" not in line
    ]
    assert not hits, "references a reader cannot follow:\n" + "\n".join(hits)


def test_private_pattern_rejects_what_it_must():
    for bad in ("see shared/papers/000_bowtie.md", "(note §1.3)", "[C] the reference code", "[code] default"):
        assert PRIVATE.search(bad), bad
    for good in ("Sheinkman & Wade 2025 (arXiv:2411.11132), §3.1, Eq. 13", "type[ConfigT]"):
        assert not PRIVATE.search(good), good


def test_result_pages_cite_the_papers_not_private_ids():
    readable = _readable()
    out = readable(
        "Paper numbers: note 003 §4.1 Table 1 (mean TPR); paper 000 HMC; Paper 004 toys; "
        "../shared/data; [code]; "
        "none we could confirm (note §9.5); --work /work/helpers/bench-run/uci-small --jobs 1"
    )
    assert "Skaaret-Lund, Storvik & Hubin (2023, arXiv:2305.03395) Table 1" in out
    assert "Sheinkman & Wade (2025, arXiv:2411.11132) HMC" in out
    assert "Ghosh, Yao & Doshi-Velez (2019, arXiv:1705.10388) toys" in out
    assert "none we could confirm;" in out and "--work WORKDIR --jobs 1" in out
    assert not re.search(r"(?i:note 00\d|paper 00\d)|/work/", out) and not PRIVATE.search(out)
    committed = [*(ROOT / "benchmarks" / "results").glob("*.md"), ROOT / "benchmarks" / "RESULTS.md"]
    for md in committed:
        text = readable(md.read_text())
        left = re.findall(r"(?i:note 00\d|paper 00\d)|shared/|note §|\[C\]|\[code\]|/work/", text)
        assert not left, f"{md.name}: {left}"


# ------------------------------------------------------------------------------------------------------
# API reference


def _public_modules() -> set[str]:
    names = set()
    for pkg in ("zoo", "guides"):
        names.add(pkg)
        path = [str(ROOT / pkg)]
        for info in pkgutil.walk_packages(path, prefix=f"{pkg}."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                names.add(info.name)
    return names


def test_api_reference_covers_every_public_module(tmp_path):
    _needs_sphinx()
    index = (DOCS / "api" / "index.md").read_text()
    assert re.search(r":recursive:\s*\n\s*\n\s*zoo\s*\n\s*guides", index)
    cmd = [
        sys.executable,
        "-m",
        "sphinx.ext.autosummary.generate",
        "-o",
        str(tmp_path),
        "-t",
        str(DOCS / "_templates"),
        str(DOCS / "api" / "index.md"),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    generated = {p.stem for p in tmp_path.glob("*.rst")}
    missing = sorted(_public_modules() - generated)
    assert not missing, f"public modules missing from the API reference: {missing}"
    assert "zoo.core.config" in generated and "guides.bowtie.cavi" in generated


# ------------------------------------------------------------------------------------------------------
# family and result pages


def _family_packages() -> list[str]:
    return sorted(p.name for p in (ROOT / "zoo" / "families").iterdir() if (p / "__init__.py").exists())


def test_every_family_has_a_page_showing_its_entries():
    from zoo.experiments.registry import available, get_entry

    index = (DOCS / "families" / "index.md").read_text()
    shown: set[str] = set()
    for family in _family_packages():
        page = DOCS / "families" / f"{family}.md"
        assert page.exists(), f"family {family!r} has no page docs/families/{family}.md"
        assert re.search(rf"^{re.escape(family)}$", index, re.MULTILINE), f"{family} not in the toctree"
        text = page.read_text()
        entries = set(re.findall(r"```\{zoo-entry\} (\S+)", text))
        own = {n for n in available() if get_entry(n).build.__module__.startswith(f"zoo.families.{family}.")}
        assert own <= entries, f"{page.name} does not show {sorted(own - entries)}"
        assert "$$" in text, f"{page.name} has no displayed equations"
        shown |= entries
    assert set(available()) <= shown


def test_every_committed_result_table_is_shown():
    sources = [*(DOCS / "families").glob("*.md"), DOCS / "results" / "index.md"]
    pages = "\n".join(p.read_text() for p in sources)
    for md in sorted((ROOT / "benchmarks" / "results").glob("*.md")):
        assert f"generated/{md.name}" in pages or f"generated/{md.stem}`" in pages, (
            f"benchmarks/results/{md.name} is not shown by any family page or the results index"
        )


def _toctree_entries(page: Path) -> set[str]:
    entries = set()
    for block in re.findall(r"```\{toctree\}\n(.*?)```", page.read_text(), re.DOTALL):
        for line in block.splitlines():
            line = line.strip()
            if line and not line.startswith(":"):
                entries.add((page.parent.relative_to(DOCS) / line).as_posix().removeprefix("./"))
    return entries


def test_every_page_is_in_a_toctree():
    listed = set().union(*(_toctree_entries(p) for p in _pages()))
    for page in _pages():
        name = page.relative_to(DOCS).with_suffix("").as_posix()
        if name != "index":
            assert name in listed, f"docs/{name}.md is in no toctree"
    notebooks = {f"tutorials/{nb.stem}" for nb in (ROOT / "tutorials").glob("*.ipynb")}
    missing = sorted(notebooks - listed)
    assert not missing, f"tutorials missing from docs/tutorials/index.md: {missing}"


# ------------------------------------------------------------------------------------------------------
# the Sphinx extension


def test_rst_problems_flags_invalid_docstrings(ext):
    assert ext.rst_problems("Overflow-free log cosh(x) = |x| + log1p(exp(-2|x|))")  # undefined substitution
    assert ext.rst_problems("Args:\n    a: one\nb: two")  # unexpected unindent
    assert ext.rst_problems("``unclosed literal")
    ok = "Uses :class:`zoo.core.model.BayesianModel` and ``x``.\n\nExample::\n\n    fit(model)\n"
    assert ext.rst_problems(ok) == []


def test_process_docstring_keeps_the_text_of_invalid_docstrings(ext):
    bad = ["log cosh(x) = |x| + c", "  indented"]
    lines = list(bad)
    ext.process_docstring(None, "function", "f", None, None, lines)
    assert lines[:2] == ["::", ""] and [ln.strip() for ln in lines[2:4]] == [b.strip() for b in bad]
    assert ext.rst_problems("\n".join(lines)) == []
    good = ["A valid docstring with ``code``."]
    lines = list(good)
    ext.process_docstring(None, "function", "f", None, None, lines)
    assert lines == good


def test_zoo_entry_renders_options_and_references(ext):
    from zoo.experiments.registry import get_entry

    lines = ext.entry_markdown("hs-bnn")
    text = "\n".join(lines)
    entry = get_entry("hs-bnn")
    rows = [ln for ln in lines if ln.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == list(entry.options.field_names())
    assert all(r.count(" | ") == 2 for r in rows), rows  # three cells: no stray pipe from a type or default
    assert "arXiv:1705.10388" in text and "(default `factorized`)" in text
    assert " at 0x" not in text  # callables are shown by name, never by address
    with pytest.raises(ValueError):
        ext.entry_markdown("no-such-model")


# ------------------------------------------------------------------------------------------------------
# references, README, CI


CITATION = re.compile(r"\b(19|20)\d\d\b")
IDENTIFIER = re.compile(r"arXiv:\d{4}\.\d{4,5}|OpenReview|JMLR|NeurIPS|ICML|Statistician|Pattern Recognition")


def citable(ref: str) -> bool:
    """A reference a user can look up: a year and an identifier, no private path."""
    return bool(CITATION.search(ref) and IDENTIFIER.search(ref)) and not PRIVATE.search(ref)


def test_citable_rejects_private_or_vague_references():
    assert not citable("shared/papers/000_bowtie.md")
    assert not citable("§3.1 and Algorithm 1 (CAVI)")
    assert not citable("Hubin & Storvik, Variational Inference (Mathematics)")
    assert citable("Ghosh, Yao & Doshi-Velez 2019, Model Selection ... (JMLR 20; arXiv:1705.10388)")


def test_zoo_list_prints_references_a_user_can_look_up():
    from zoo.experiments.registry import available, format_table, get_entry

    for name in available():
        refs = get_entry(name).references
        assert refs and all(citable(r) for r in refs), f"{name}: {refs}"
    table = format_table()
    assert "arXiv:2411.11132" in table and "arXiv:2305.03395" in table and not PRIVATE.search(table)


def test_readme_ci_and_extra_name_the_docs_build():
    assert BUILD_COMMAND in (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python -m sphinx -W" in ci and '".[docs]"' in ci
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=\[]", d)[0].strip().lower() for d in extras["docs"]}
    assert {"sphinx", "myst-nb", "pydata-sphinx-theme"} <= names
    conf = (DOCS / "conf.py").read_text()
    assert 'nb_execution_mode = "off"' in conf
