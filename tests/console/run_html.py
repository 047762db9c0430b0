"""Reading the console's HTML in test-client tests: elements by ``data-testid``, with their
attributes and visible text, through the standard library's parser (no browser needed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

BLOCKS = frozenset({"br", "dd", "div", "dt", "li", "p", "pre", "td", "th", "tr"})
"""Tags whose edges separate words in the visible text, as a browser lays them out."""
VOID = frozenset({"area", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"})


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    parts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The visible text, whitespace collapsed."""
        return " ".join("".join(self.parts).split())


class _Finder(HTMLParser):
    def __init__(self, testid: str) -> None:
        super().__init__(convert_charrefs=True)
        self.testid = testid
        self.found: list[Element] = []
        self.depth = 0
        self.open: list[tuple[int, Element]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._separate(tag)
        values = {name: value or "" for name, value in attrs}
        if values.get("data-testid") == self.testid:
            element = Element(tag, values)
            self.found.append(element)
            if tag not in VOID:
                self.open.append((self.depth, element))
        if tag not in VOID:
            self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        self._separate(tag)
        if tag in VOID:
            return
        self.depth -= 1
        while self.open and self.open[-1][0] >= self.depth:
            self.open.pop()

    def _separate(self, tag: str) -> None:
        if tag in BLOCKS:
            self.handle_data(" ")

    def handle_data(self, data: str) -> None:
        for _, element in self.open:
            element.parts.append(data)


def find(html: str, testid: str) -> list[Element]:
    """Every element whose ``data-testid`` is ``testid``, in document order."""
    finder = _Finder(testid)
    finder.feed(html)
    finder.close()
    return finder.found


def texts(html: str, testid: str) -> list[str]:
    """The visible text of each element with ``data-testid`` ``testid``."""
    return [element.text for element in find(html, testid)]


def text(html: str, testid: str) -> str:
    """The visible text of the one element with ``data-testid`` ``testid``."""
    found = texts(html, testid)
    assert len(found) == 1, f"{len(found)} elements have data-testid={testid!r}"
    return found[0]
