"""The real Sphinx build of the site, executing every guide (no cache), warnings fatal.

The build writes _build/html, which the later tests in this file read.
"""

import html
import re

import nbformat
import pytest
from conftest import BUILD, DOCS, HTML, NOTEBOOKS, ROOT, guide_names, run, sphinx_command

BUILD_TIMEOUT = 1800
SMART_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


@pytest.fixture(scope="module")
def site():
    result = run(sphinx_command(DOCS, HTML, BUILD / "doctrees"), BUILD_TIMEOUT, cwd=ROOT)
    return result


def test_sphinx_build_executes_every_guide_without_warnings(site):
    assert site.returncode == 0, (
        "the Sphinx build failed (each failing cell is reported with its guide and traceback):\n"
        + site.stdout[-20000:]
    )
    for name in guide_names():
        assert f"{name}.md: Executed notebook" in site.stdout, f"{name} was not executed"


def headings(md_text):
    """The ## and ### headings of a MyST page, outside code cells, as plain text."""
    text = re.sub(r"```.*?```", "", md_text, flags=re.S)
    found = re.findall(r"^#{2,3} (.+)$", text, re.M)
    return [re.sub(r"[`*]", "", h).strip() for h in found]


@pytest.mark.parametrize("name", guide_names())
def test_built_page_shows_sections_and_outputs(site, name):
    assert site.returncode == 0, "the build failed; see the test above"
    page = (HTML / f"{name}.html").read_text()
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    text = text.translate(SMART_QUOTES)  # Sphinx renders ' and " as typographic quotes
    for heading in headings((DOCS / f"{name}.md").read_text()):
        assert heading in text, f"{name}.html lacks the section heading {heading!r}"

    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", 4)
    with_output = [c for c in nb.cells if c.cell_type == "code" and c.outputs]
    rendered = page.count('class="cell_output')
    assert rendered == len(with_output), (
        f"{name}.html renders {rendered} cell outputs; the notebook has {len(with_output)}"
    )


def test_index_links_every_guide(site):
    assert site.returncode == 0, "the build failed; see the test above"
    index = (HTML / "index.html").read_text()
    for name in guide_names():
        assert f'href="{name}.html"' in index, f"index.html does not link {name}.html"
