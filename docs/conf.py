"""Sphinx configuration of the pyro-bnn-zoo documentation.

Build: ``python -m sphinx -W -b html docs docs/_build/html`` (warnings are errors).

Notebooks render from their committed outputs (``nb_execution_mode = "off"``): the build never trains.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "_ext"))
os.environ.setdefault("MPLBACKEND", "Agg")

project = "pyro-bnn-zoo"
author = "pyro-bnn-zoo developers"
copyright = "2026, pyro-bnn-zoo developers"
release = "0.1.0"

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # MathJax 3 shipped with the site: equations render without a network
    "sphinx.ext.viewcode",
    "zoo_docs",
]

autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": True, "show-inheritance": True, "ignore-module-all": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"

nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
templates_path = ["_templates"]
html_theme = "pydata_sphinx_theme"
html_title = "pyro-bnn-zoo"
html_static_path = ["_static"]
html_css_files = ["zoo.css"]
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}


def _copy_tutorials() -> None:
    """Copy ``tutorials/*.ipynb`` into ``docs/tutorials/`` (git-ignored) so Sphinx renders their outputs."""
    target = DOCS / "tutorials"
    target.mkdir(exist_ok=True)
    for nb in sorted((ROOT / "tutorials").glob("*.ipynb")):
        dst = target / nb.name
        if not dst.exists() or dst.read_bytes() != nb.read_bytes():
            shutil.copyfile(nb, dst)


# The papers behind the protocol ids the committed result tables use ("paper 003", "note 003 §4.1").
PAPERS = {
    "000": "Sheinkman & Wade (2025, arXiv:2411.11132)",
    "001": "Hubin & Storvik (2019, arXiv:1903.07594)",
    "002": "Tomczak, Swaroop, Foong & Turner (2021, NeurIPS)",
    "003": "Skaaret-Lund, Storvik & Hubin (2023, arXiv:2305.03395)",
    "004": "Ghosh, Yao & Doshi-Velez (2019, arXiv:1705.10388)",
}
_NOTE_REF = re.compile(r"\bnote (00[0-4])(?: §[0-9][0-9.,\-–]*)?", re.IGNORECASE)
_PAPER_REF = re.compile(r"\bpaper (00[0-4])", re.IGNORECASE)
_NOTE_SECTION = re.compile(r"\s*\(note §[0-9][0-9.,\-–]*\)|\bnote §[0-9][0-9.,\-–]*")  # PRIVATE id
_CODE_TAG = re.compile(r"\[C\]|\[code\]")  # the PRIVATE tags of the authors' reference code
_DATA_ROOT = re.compile(r"(\.\./)*shared/data")  # PRIVATE: the machine's data folder
_LOCAL_PATH = re.compile(r"/work/[^\s`'\"]*")  # a machine-local working folder named in a command


def readable(text: str) -> str:
    """Result text with the protocol ids replaced by the papers' citations and no machine-local paths."""
    text = _NOTE_REF.sub(lambda m: PAPERS[m.group(1)], text)
    text = _PAPER_REF.sub(lambda m: PAPERS[m.group(1)], text)
    text = _NOTE_SECTION.sub("", text)
    text = _CODE_TAG.sub("(authors' code)", text)
    return _LOCAL_PATH.sub("WORKDIR", _DATA_ROOT.sub("/path/to/data", text))


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _copy_results() -> None:
    """Render ``benchmarks/results/*.md`` (and their figures) and ``benchmarks/RESULTS.md`` as pages under
    ``docs/results/generated/`` (git-ignored): the committed tables are the only source of the numbers."""
    out = DOCS / "results" / "generated"
    out.mkdir(parents=True, exist_ok=True)
    results = ROOT / "benchmarks" / "results"
    for md in sorted(results.glob("*.md")):
        text = readable(md.read_text())
        first, _, rest = text.partition("\n")
        if first.startswith("# ") and first[2:].strip() != md.stem and first[2:].strip() in md.stem:
            text = f"# {md.stem}\n{rest}"  # a variant's table is titled by its file (lbbnn-mnist10k-psi0.5)
        png = md.with_suffix(".png")
        if png.exists():  # a table's own figure goes under it (copied below with the others)
            text += f"\n\n![{md.stem}](/results/generated/{png.name})\n"
        _write_if_changed(out / md.name, text)
    for png in results.glob("*.png"):  # every figure, also those a table links to by name (scoreboard-bands)
        if not (out / png.name).exists() or (out / png.name).read_bytes() != png.read_bytes():
            shutil.copyfile(png, out / png.name)
    notes = readable((ROOT / "benchmarks" / "RESULTS.md").read_text())
    _write_if_changed(out / "RESULTS.md", notes.replace("](results/", "](/results/generated/"))


_copy_tutorials()
_copy_results()
