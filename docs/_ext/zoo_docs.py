"""Sphinx helpers of the zoo's documentation.

* ``autodoc-process-docstring`` hook: a docstring that is not valid reStructuredText (a few of the zoo's
  docstrings write math as plain text, e.g. ``|x|``, or indent continuation lines) is shown verbatim as a
  literal block instead of failing the ``-W`` build; every valid one renders as reStructuredText.
* ``zoo-entry`` directive: the registry entry of a model (summary, guides, tasks, references and the
  builder options of ``zoo.get_entry(name).options`` with their defaults), read from the code so the
  family pages can never drift from it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator
from typing import Any

from docutils import nodes
from docutils.core import publish_doctree
from docutils.parsers.rst import Directive, directives, roles
from docutils.statemachine import StringList
from sphinx.application import Sphinx

_ROLE = re.compile(r":[\w:.+-]+:`([^`]*)`")
_IGNORED = ("Unknown interpreted text role", "Unknown directive type", "No role entry", "No directive entry")


_DIRECTIVE, _ROLE_LOOKUP = directives.directive, roles.role  # docutils' own lookups (Sphinx patches them)


@contextlib.contextmanager
def _plain_docutils() -> Iterator[None]:
    """Plain docutils registries for a side parse (Sphinx's directives and roles need a build env)."""
    saved = (directives.directive, roles.role, directives._directives, roles._roles)
    directives.directive, roles.role = _DIRECTIVE, _ROLE_LOOKUP
    directives._directives, roles._roles = {}, {}
    try:
        yield
    finally:
        directives.directive, roles.role, directives._directives, roles._roles = saved


def rst_problems(text: str) -> list[str]:
    """The docutils warnings and errors ``text`` raises (Sphinx roles stripped, unknown roles ignored)."""
    plain = _ROLE.sub(lambda m: f"``{m.group(1)}``" if m.group(1) else "x", text)
    with _plain_docutils():
        doc = publish_doctree(
            plain, settings_overrides={"report_level": 2, "halt_level": 5, "warning_stream": False}
        )
    found = []
    for msg in [*doc.findall(nodes.system_message), *doc.transform_messages]:
        body = msg.astext()
        if msg["level"] >= 2 and not any(s in body for s in _IGNORED):
            found.append(body)
    return found


def as_literal(lines: list[str]) -> list[str]:
    """``lines`` as one literal block (kept verbatim: the text is shown exactly as written)."""
    return ["::", ""] + [f"    {line}" if line.strip() else "" for line in lines] + [""]


def process_docstring(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    if lines and rst_problems("\n".join(lines)):
        lines[:] = as_literal(lines)


def _show(value: Any) -> str:
    """A value as it reads in a table cell (callables by name, no memory addresses, no pipes)."""
    text = getattr(value, "__name__", None) if callable(value) else None
    return (text or repr(value)).replace("|", "\\|")


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        return _show(field.default)
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return _show(field.default_factory())  # type: ignore[misc]
    return "required"


def _annotation(field: dataclasses.Field) -> str:
    ann = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    return ann.replace(" | ", " or ")


def entry_markdown(name: str) -> list[str]:
    """MyST Markdown describing registry entry ``name`` (the family pages are Markdown)."""
    from zoo.experiments.registry import get_entry

    e = get_entry(name)
    guides = ", ".join(f"`{g}`" for g in e.guides)
    out = [
        f"**`{name}`**: {e.summary}",
        "",
        f"* guides: {guides} (default `{e.default_guide}`)",
        f"* tasks: {', '.join(e.tasks)}; default hidden layers: `{tuple(e.default_hidden)}`",
    ]
    out += [f"* reference: {ref}" for ref in e.references]
    if e.fit_defaults:
        out.append("* fit defaults: " + ", ".join(f"`{k}={_show(v)}`" for k, v in e.fit_defaults.items()))
    out.append("")
    if e.options is not None:
        cls = e.options
        out += [
            f"Options (`--option KEY=VALUE`; {{class}}`{cls.__module__}.{cls.__qualname__}`):",
            "",
            "| option | type | default |",
            "|---|---|---|",
        ]
        out += [f"| `{f.name}` | `{_annotation(f)}` | `{_default(f)}` |" for f in dataclasses.fields(cls)]
        out.append("")
    return out


class ZooEntry(Directive):
    """``zoo-entry NAME`` (in a MyST page): the registry entry ``NAME`` as read from the code."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        container = nodes.container(classes=["zoo-entry"])
        lines = StringList(entry_markdown(self.arguments[0]), source="zoo-entry")
        self.state.nested_parse(lines, self.content_offset, container)
        return [container]


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("autodoc-process-docstring", process_docstring)
    app.add_directive("zoo-entry", ZooEntry)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
