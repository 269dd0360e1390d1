"""The real Sphinx build of the site (the `site` fixture of conftest.py), checked as built.

The build executes every guide (no cache), with warnings fatal and networking cut off.
"""

import html
import re

import nbformat
import pytest
from conftest import DOCS, HTML, IN_CI, NOTEBOOKS, SMART_QUOTES, guide_names, headings


def test_sphinx_build_executes_every_guide_without_warnings(site):
    assert site.returncode == 0, (
        "the Sphinx build failed (each failing cell is reported with its guide and traceback):\n"
        + site.stdout[-20000:]
    )
    for name in guide_names():
        assert f"{name}.md: Executed notebook" in site.stdout, f"{name} was not executed"


def test_the_build_needs_no_network(site):
    """The build above ran in a network namespace with only loopback: nothing was fetched."""
    if not site.offline:
        message = (
            "could not cut networking off for the build (needs `unshare --net` and `ip`, "
            "usually root): the offline check did not run"
        )
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    assert site.returncode == 0, "the offline build failed; see the first test of this file"


@pytest.mark.parametrize("name", guide_names())
def test_built_page_shows_sections_and_outputs(site, name):
    assert site.returncode == 0, "the build failed; see the test above"
    page = (HTML / f"{name}.html").read_text()
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    text = text.translate(SMART_QUOTES)
    for heading in headings((DOCS / f"{name}.md").read_text()):
        assert heading in text, f"{name}.html lacks the section heading {heading!r}"

    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", 4)
    with_output = [c for c in nb.cells if c.cell_type == "code" and c.outputs]
    rendered = page.count('class="cell_output')
    assert rendered == len(with_output), (
        f"{name}.html renders {rendered} cell outputs; the notebook has {len(with_output)}"
    )
