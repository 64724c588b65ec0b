"""The tutorial notebooks.

* Every notebook executes top to bottom at smoke size (``ZOO_SMOKE=1``), without errors and without
  progress-bar / widget warnings.
* Every *committed* notebook carries the outputs of one full top-to-bottom run (so that a reader on a code
  host or in the rendered docs sees results and figures): :func:`output_problems` lists what is missing,
  and is itself tested on notebooks it must reject.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import pytest

try:
    import nbformat
    from nbclient import NotebookClient
except ImportError as e:  # the GPU check's machine has no notebook stack, and this module no device test
    if os.environ.get("ZOO_DEVICE_TESTS_ONLY") == "1":
        pytest.skip(f"{e.name} is not installed (device tests only)", allow_module_level=True)
    raise

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "tutorials").glob("*.ipynb"))
MAX_BYTES = 1_500_000  # a committed notebook with its figures stays below this
# references a reader cannot follow: private notes ("note 003 §4.3", "note §9.5"), the internal paper
# numbering ("paper 000" ... "paper 004"; tests/test_citations.py checks the docs), shared/ paths, source tags
PRIVATE = re.compile(r"shared/|note §|(?i:note 00\d|paper 00[0-4])|\[C\]|\[code\]")
# the first markdown cell states the size of the committed run and how long it took
RUN_SIZE = re.compile(r"\bsize\b", re.IGNORECASE)
RUN_TIME = re.compile(r"\b\d+(\.\d+)?\s*(s|seconds?|min|minutes?)\b")
PROGRESS_WARNINGS = ("IProgress not found", "TqdmWarning", "TqdmExperimentalWarning")
WIDGET = "application/vnd.jupyter.widget-view+json"


def _texts(output) -> list[str]:
    if output.output_type == "stream":
        return [output.text]
    if output.output_type == "error":
        return [output.ename, output.evalue]
    data = output.get("data", {})
    return [v if isinstance(v, str) else "".join(v) for k, v in data.items() if k.startswith("text/")]


def output_problems(nb: nbformat.NotebookNode, size: int) -> list[str]:
    """Why ``nb`` (serialized to ``size`` bytes) is not a committed, executed tutorial; ``[]`` when it is."""
    problems = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    outputs = [o for c in code for o in c.get("outputs", [])]
    counts = [c.get("execution_count") for c in code]
    if not code:
        problems.append("no code cells")
    if not outputs:
        problems.append("no outputs: commit the notebook executed")
    if any(n is None for n in counts):
        problems.append(f"{sum(n is None for n in counts)} code cell(s) not executed")
    elif counts != list(range(1, len(code) + 1)):
        problems.append(f"not one top-to-bottom run in a fresh kernel (execution counts {counts})")
    if not any("image/png" in o.get("data", {}) for o in outputs):
        problems.append("no figures (image/png outputs)")
    if any(o.output_type == "error" for o in outputs):
        problems.append("error output")
    if any(o.output_type == "stream" and o.name == "stderr" for o in outputs):
        problems.append("stderr output (warnings or progress bars)")
    if any(WIDGET in o.get("data", {}) for o in outputs):
        problems.append("widget output (renders as nothing outside Jupyter)")
    texts = [c.source for c in nb.cells] + [t for o in outputs for t in _texts(o)]
    if any(PRIVATE.search(t) for t in texts):
        problems.append("reference to private notes")
    first = next((c.source for c in nb.cells if c.cell_type == "markdown"), "")
    if not (RUN_SIZE.search(first) and RUN_TIME.search(first)):
        problems.append("the first markdown cell does not state the run size and its time")
    if size > MAX_BYTES:
        problems.append(f"{size} bytes > {MAX_BYTES}: lower the figure dpi or the number of figures")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_notebook_has_outputs(path):
    nb = nbformat.read(path, as_version=4)
    assert output_problems(nb, path.stat().st_size) == [], path.name


def _good() -> tuple[nbformat.NotebookNode, int]:
    """A minimal notebook that passes: one executed cell with text and a figure."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# T\n\nFull size, executed in 12 s on one thread."),
        nbformat.v4.new_code_cell("print(1)", execution_count=1),
        nbformat.v4.new_code_cell("plot()", execution_count=2),
    ]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    nb.cells[2].outputs = [nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo="})]
    return nb, 1000


def _bad(edit) -> list[str]:
    nb, size = _good()
    nb = copy.deepcopy(nb)
    ret = edit(nb)
    return output_problems(nb, ret if isinstance(ret, int) else size)


def test_output_check_accepts_a_good_notebook():
    assert output_problems(*_good()) == []


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda nb: [c.update(outputs=[], execution_count=None) for c in nb.cells[1:]], "no outputs"),
        (lambda nb: nb.cells[2].update(execution_count=None), "not executed"),
        (lambda nb: nb.cells[2].update(execution_count=7), "top-to-bottom"),
        (lambda nb: nb.cells[2].update(outputs=[]), "no figures"),
        (
            lambda nb: nb.cells[1].outputs.append(nbformat.v4.new_output("error", ename="E", evalue="x")),
            "error",
        ),
        (
            lambda nb: nb.cells[1].outputs.append(
                nbformat.v4.new_output("stream", name="stderr", text="TqdmWarning: IProgress not found")
            ),
            "stderr",
        ),
        (
            lambda nb: nb.cells[1].outputs.append(
                nbformat.v4.new_output("display_data", data={WIDGET: {"model_id": "a"}, "text/plain": "w"})
            ),
            "widget",
        ),
        (lambda nb: nb.cells[0].update(source="# T\n\nSee shared/papers/x.md, full size, 12 s."), "private"),
        (lambda nb: nb.cells[1].update(source="x = 1  # note §3"), "private"),
        (lambda nb: nb.cells[0].update(source="# T\n\nAs in paper 004 §6, full size, 12 s."), "private"),
        (
            lambda nb: nb.cells[1].outputs.append(
                nbformat.v4.new_output("stream", name="stdout", text="note 003")
            ),
            "private",
        ),
        (lambda nb: nb.cells[0].update(source="# T\n\nA tutorial."), "run size"),
        (lambda nb: MAX_BYTES + 1, "bytes"),
    ],
    ids=[
        "stripped",
        "cell-not-run",
        "out-of-order",
        "no-figure",
        "error",
        "stderr",
        "widget",
        "private-md",
        "private-code",
        "private-paper-number",
        "private-note-in-output",
        "no-size",
        "too-big",
    ],
)
def test_output_check_rejects(edit, expected):
    problems = _bad(edit)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, monkeypatch):
    monkeypatch.setenv("ZOO_SMOKE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("ZOO_NUM_THREADS", "1")
    # the kernel imports this checkout, whatever version of the project is installed
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    noisy = [t for o in outputs for t in _texts(o) if any(w in t for w in PROGRESS_WARNINGS)]
    assert not noisy, noisy
    assert not [o for o in outputs if WIDGET in o.get("data", {})]


def test_there_are_tutorials():
    assert NOTEBOOKS, "tutorials/ has no notebooks"
