"""docs/notation.md: one letter per thing, its constants those guide_helpers computes with, and a
link to it from every guide that writes a sharded array in its notation."""

import re

import pytest
from conftest import DOCS, guide_names

from guide_helpers import hlo, plan, roofline

NOTATION = DOCS / "notation.md"
SHARDED = re.compile(r"\w+\[[\w, ()]*@")  # x[batch@data, embed], W1[embed, hidden@model], ...


def tables(heading):
    """The tables after a heading of the notation page, each a list of rows of cells."""
    text = NOTATION.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"(?:^\|.*\|\n)+", text, re.M)
    return [
        [[cell.strip() for cell in line.strip("|").split("|")] for line in block.splitlines()[2:]]
        for block in found
    ]


def test_each_letter_means_one_thing():
    dimensions, hardware = tables("Letters")
    letters = [row[0] for row in dimensions + hardware]
    assert len(letters) == len(set(letters)) == 13, letters
    assert all(re.fullmatch(r"\$[^$]+\$", letter) for letter in letters), letters


def test_the_bytes_per_parameter_are_the_helpers():
    (rows,) = tables("Bytes per parameter")
    totals = [int(row[-1]) for row in rows]
    mixed_copy = sum(roofline.MIXED.values())
    assert totals == [
        sum(roofline.ADAM_STATE.values()),
        mixed_copy,
        plan.STATE_BYTES + plan.GRADIENT_BYTES,
    ]
    for row in rows:  # the parts add up to the total
        parts = [int(re.match(r"\d+", c)[0]) for c in row[1:-1] if c != "-"]
        assert sum(parts) == int(row[-1]), row
    update = re.search(r"(\d+) bytes of HBM traffic per parameter with the bf16\s+copy and bf16 "
                       r"gradients, (\d+) with f32", NOTATION.read_text())  # fmt: skip
    assert [int(n) for n in update.groups()] == [roofline.ADAM_UPDATE_BYTES, plan.UPDATE_BYTES]


@pytest.mark.parametrize("n", [2, 4, 8])
def test_the_ring_factors_are_the_helpers(n):
    assert "\\frac{n-1}{n}" in NOTATION.read_text()
    assert hlo.ring(n, 1.0, hlo.RING_PASSES["all-gather"]) == (n - 1) / n
    assert hlo.RING_PASSES["reduce-scatter"] == 1 and hlo.RING_PASSES["all-reduce"] == 2
    assert hlo.ring(None, 1.0, 2) == 2


@pytest.mark.parametrize("name", guide_names())
def test_a_guide_that_writes_the_notation_links_to_it(name):
    text = (DOCS / f"{name}.md").read_text()
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    if SHARDED.search(prose):
        assert "(notation.md)" in prose, f"docs/{name}.md writes sharded arrays: link notation.md"
