"""Sphinx extension: the book's citation style, author-year in round brackets.

sphinxcontrib-bibtex's `author_year` style writes [Raffel et al., 2020]. This registers the same style with
round brackets as `author_year_round` (selected by `bibtex_reference_style` in _config.yml), so that

    {cite:p}`raffel2020t5`                ->  (Raffel et al., 2020)
    {cite:p}`lewis2020bart,lewis2020rag`  ->  (Lewis et al., 2020; Lewis et al., 2020)
    {cite:t}`raffel2020t5`                ->  Raffel et al. (2020)

and adds citations.css, which hides the numeric labels of the reference list: its entries are sorted by
author and year (pybtex's `plain` style), so it reads like a printed author-year bibliography.
"""

import dataclasses
from pathlib import Path

from sphinxcontrib.bibtex.plugin import register_plugin
from sphinxcontrib.bibtex.style.referencing import BracketStyle
from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle

STATIC = Path(__file__).resolve().parent / "static"


def round_brackets() -> BracketStyle:
    return BracketStyle(left="(", right=")", sep="; ")


@dataclasses.dataclass
class RoundAuthorYearReferenceStyle(AuthorYearReferenceStyle):
    bracket_parenthetical: BracketStyle = dataclasses.field(default_factory=round_brackets)
    bracket_textual: BracketStyle = dataclasses.field(default_factory=round_brackets)
    bracket_year: BracketStyle = dataclasses.field(default_factory=round_brackets)


def add_static_path(app) -> None:
    app.config.html_static_path.append(str(STATIC))


def setup(app):
    register_plugin("sphinxcontrib.bibtex.style.referencing", "author_year_round", RoundAuthorYearReferenceStyle)
    app.connect("builder-inited", add_static_path)
    app.add_css_file("citations.css")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
