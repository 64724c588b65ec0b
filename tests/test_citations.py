"""User-visible text cites the papers by authors, year, arXiv id, section and equation, never by the private
implementation notes ("note 003 §4.3", "note §9.5") or their internal numbering ("paper 000" ... "paper
004"), for which a reader has no key: the README, the Sphinx pages, the committed result tables (which the
docs include), the results discussion and every registered protocol's description and paper source (which
``zoo reproduce`` writes into NAME.md and prints with ``--list``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from zoo.experiments.reproduce import PROTOCOLS, available_protocols

ROOT = Path(__file__).resolve().parents[1]
PRIVATE = re.compile(r"note 00|note §|paper 00[0-4]", re.IGNORECASE)


def _documents() -> list[Path]:
    docs = [p for p in (ROOT / "docs").rglob("*.md") if not {"_build", "generated"} & set(p.parts)]
    return [
        ROOT / "README.md",
        ROOT / "benchmarks" / "RESULTS.md",
        *sorted(docs),
        *sorted((ROOT / "benchmarks" / "results").glob("*.md")),
    ]


def private_citations(text: str) -> list[str]:
    """Each private citation in ``text`` with a little context."""
    return [text[max(m.start() - 30, 0) : m.end() + 30].replace("\n", " ") for m in PRIVATE.finditer(text)]


def test_the_pattern_catches_the_private_forms_and_spares_the_public_ones():
    assert len(private_citations("(note 003 §4.3), note §9.5, Paper 004 toys, paper 001's code")) == 4
    public = "Skaaret-Lund et al. 2023 (arXiv:2305.03395), §5.1, Table 1; a note: see §2"
    assert private_citations(public) == []


@pytest.mark.parametrize("path", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_user_visible_files_cite_no_private_note(path):
    assert private_citations(path.read_text()) == []


def test_protocol_descriptions_and_paper_sources_cite_no_private_note():
    found = {
        (name, field): private_citations(getattr(PROTOCOLS[name], field))
        for name in available_protocols()
        for field in ("description", "paper_source")
    }
    assert {k: v for k, v in found.items() if v} == {}
