"""The repository stands alone: comments and docstrings cite code and documents that are in it,
and every relative link in its Markdown documents leads to a file that exists.

What a reader cannot open from a clone — a numbered issue, a section of a specification kept
elsewhere, a design or style note outside the repository — is no help to them: its content
belongs in docs/architecture.md, and the comment names that file or the code instead.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: what a citation of a document outside the repository looks like
OUTSIDE = re.compile(
    r"\bissues?\s+#?\d"  # a numbered issue
    r"|\bspec[/]"  # a path into a specification folder
    r"|\bspec\s+§"  # a section of "the spec"
    r"|§\s*\d"  # any numbered section
    r"|\bDESIGN\.md\b"
    r"|\bSTYLE\.md\b",
    re.IGNORECASE,
)

#: the Markdown documents whose relative links must lead somewhere
DOCUMENTS = ("README.md", "CONTRIBUTING.md", "docs/*.md")

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)
_INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//|#)", re.IGNORECASE)


def scanned_files() -> list[Path]:
    """Every text file of ``src/``, ``tests/``, ``bench/``, ``docs/`` and ``.ci/``, the Makefile,
    pyproject.toml, the README and CONTRIBUTING.md (this file aside: its examples are citations on
    purpose)."""
    files = [ROOT / name for name in ("Makefile", "pyproject.toml", "README.md", "CONTRIBUTING.md")]
    here = Path(__file__).resolve()
    for top in ("src", "tests", "bench", "docs", ".ci"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path != here:
                files.append(path)
    return files


def citations(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of each line of ``text`` that cites a document outside the
    repository."""
    return [
        (number, line.strip())
        for number, line in enumerate(text.splitlines(), start=1)
        if OUTSIDE.search(line)
    ]


def relative_links(markdown: str) -> list[str]:
    """The link targets of ``markdown`` that are paths in the repository (no URL, no bare
    anchor), without their ``#fragment``; code blocks and code spans are not links."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", markdown))
    targets = _INLINE_LINK.findall(text) + _REFERENCE_LINK.findall(text)
    return [t.split("#", 1)[0] for t in targets if not _EXTERNAL.match(t) and t.split("#", 1)[0]]


def test_the_rules_recognize_what_they_look_for() -> None:
    assert citations("x = 1  # see issue 11\nok\n") == [(1, "x = 1  # see issue 11")]
    for cited in ("Issue 8 §4", "(spec §4)", "spec/tasks.md", "(§4-5)", "DESIGN.md", "STYLE.md §8"):
        assert citations(cited), cited
    for fine in ("docs/architecture.md", "tool_spec", "an issue with it", "specs"):
        assert not citations(fine), fine
    markdown = (
        "[a](docs/a.md#x) [b](https://x.org) [c](#top) ![d](img/d.png)\n"
        "`[e](not/a/link)`\n```\n[f](not/either)\n```\n[g]: ../g.md\n"
    )
    assert relative_links(markdown) == ["docs/a.md", "img/d.png", "../g.md"]


def test_no_citation_of_documents_outside_the_repository() -> None:
    found = []
    for path in scanned_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [f"{path.relative_to(ROOT)}:{n}: {line}" for n, line in citations(text)]
    assert not found, (
        "these lines cite an issue number, a spec section, DESIGN.md or STYLE.md, none of "
        "which is in the repository; name the code or docs/architecture.md instead:\n"
        + "\n".join(found)
    )


def test_every_relative_link_leads_to_a_file() -> None:
    documents = sorted({p for pattern in DOCUMENTS for p in ROOT.glob(pattern)})
    assert ROOT / "docs" / "architecture.md" in documents
    broken = [
        f"{doc.relative_to(ROOT)}: {target}"
        for doc in documents
        for target in relative_links(doc.read_text(encoding="utf-8"))
        if not (doc.parent / target).exists()
    ]
    assert not broken, "these links lead to no file; fix the path:\n" + "\n".join(broken)
