"""docs/index.md's "Find your question" table: each question links to the section that answers it.

The first two tests read the sources only; the last reads the built site (the `site` fixture).
"""

import html
import re
from typing import NamedTuple

from conftest import DOCS, HTML, SMART_QUOTES

INDEX = DOCS / "index.md"
HEADING = "Find your question"
SEPARATOR = " › "  # a link's text: the page's title in the index, then the section's heading
LINK = re.compile(r"\[(.+)\]\((\w+)\.md#([\w-]+)\)")


class Row(NamedTuple):
    question: str
    text: str  # the link's text
    name: str  # the page, docs/NAME.md
    anchor: str


def rows():
    """The rows of the first table between the heading and the next ## heading of docs/index.md."""
    text = INDEX.read_text()
    assert f"\n## {HEADING}\n" in text, f"docs/index.md has no '## {HEADING}' section"
    section = text.split(f"\n## {HEADING}\n", 1)[1].split("\n## ", 1)[0]
    table = re.search(r"(?:^\|.*\n)+", section, re.M)
    assert table, f"no table under '## {HEADING}'"
    found = []
    for line in table[0].splitlines()[2:]:  # after the header row and its --- row
        question, answer = (cell.strip() for cell in line.strip("|").split("|"))
        link = LINK.fullmatch(answer)
        assert link, f"not one link to a page's section: {answer!r}"
        found.append(Row(question, *link.groups()))
    return found


def titles():
    """Each page's title as the index's lists link it: `- [Title](NAME.md): ...`."""
    listed = re.findall(r"^- \[(.+?)\]\((\w+)\.md\)", INDEX.read_text(), re.M)
    return {name: title for title, name in listed}


def slug(title):
    """MyST's anchor for a heading (GitHub's rule): lower case, each space a hyphen, and every
    character but a letter, digit, underscore or hyphen dropped (backticks, commas, colons...)."""
    return re.sub(r"[^\w-]", "", title.lower().replace(" ", "-"))


def anchors(name):
    """The anchors of a page's # to ### headings (conf.py's myst_heading_anchors = 3), each with
    its heading as written, outside code fences; a repeated anchor gets -1, -2, ... as in MyST."""
    found, fence = {}, None
    for line in (DOCS / f"{name}.md").read_text().splitlines():
        if fence:  # a fence closes with a line of at least as many of its characters, alone
            closing = line.rstrip()
            if len(closing) >= len(fence) and closing == fence[0] * len(closing):
                fence = None
        elif opening := re.match(r"`{3,}|~{3,}", line):
            fence = opening.group()
        elif heading := re.match(r"#{1,3} (.+)$", line):
            written = heading.group(1).strip()
            base = slug(re.sub(r"[`*]", "", written))
            anchor, n = base, 1
            while anchor in found:
                anchor, n = f"{base}-{n}", n + 1
            found[anchor] = written
    return found


def test_the_table_asks_at_least_15_questions():
    questions = [row.question for row in rows()]
    assert len(questions) >= 15, f"the table has {len(questions)} questions, fewer than 15"
    repeated = {q for q in questions if questions.count(q) > 1}
    assert not repeated, f"questions asked twice: {repeated}"


def test_each_link_names_its_page_and_a_heading_of_that_page():
    pages = titles()
    for row in rows():
        assert (DOCS / f"{row.name}.md").exists(), f"{row.text!r} links docs/{row.name}.md, absent"
        assert row.name in pages, f"{row.name}.md is not in the index's lists of guides"
        headings = anchors(row.name)
        assert row.anchor in headings, (
            f"{row.name}.md has no heading whose anchor is {row.anchor!r}: {sorted(headings)}"
        )
        expected = pages[row.name] + SEPARATOR + headings[row.anchor]
        assert row.text == expected, f"the link's text {row.text!r} is not {expected!r}"


def plain(fragment):
    """A fragment of built HTML as the reader sees it: no permalink, tags, entities or curly
    quotes, spaces collapsed."""
    fragment = re.sub(r'<a class="headerlink".*?</a>', "", fragment, flags=re.S)
    text = html.unescape(re.sub(r"<[^>]+>", "", fragment)).translate(SMART_QUOTES)
    return " ".join(text.split())


def test_each_built_link_lands_on_its_section(site):
    assert site.returncode == 0, "the build failed; see tests/site/test_build.py"
    index = (HTML / "index.html").read_text()
    section = re.search(r'<section id="find-your-question">(.*?)</section>', index, re.S)
    assert section, f"index.html has no section {HEADING!r}"
    links = re.findall(r'<a [^>]*href="(\w+)\.html#([^"]+)"[^>]*>(.*?)</a>', section[1], re.S)
    expected = rows()
    assert len(links) == len(expected), (
        f"index.html's table has {len(links)} links to a page's section; index.md {len(expected)}"
    )
    for (name, target, text), row in zip(links, expected):
        assert name == row.name, f"{row.text!r} was built as a link to {name}.html"
        page = (HTML / f"{name}.html").read_text()
        at = page.find(f' id="{target}"')
        assert at >= 0, f"{name}.html has no element with id {target!r} ({row.text!r})"
        heading = re.search(r"<h([1-6])[^>]*>(.*?)</h\1>", page[at:], re.S)
        section_title = plain(text).split(SEPARATOR, 1)[-1]
        assert heading and plain(heading[2]) == section_title, (
            f"{name}.html#{target} is the section {plain(heading[2]) if heading else None!r}, "
            f"not {section_title!r}"
        )
