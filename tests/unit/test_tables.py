"""guide_helpers.tables: the HTML tables the pages show."""

import pytest

from guide_helpers import tables


def test_tables_escape_and_align():
    table = tables.html_table(["layout", "bytes"], [["<data>", tables.mib(3 * 2**19)]])
    assert table.data == (
        '<table><tr><th>layout</th><th style="text-align: right">bytes</th></tr>'
        '<tr><td>&lt;data&gt;</td><td style="text-align: right">1.50 MiB</td></tr></table>'
    )


def test_tables_align_text_columns_left_when_asked():
    table = tables.html_table(["linen", "NNX"], [["a", "b"]], align=["left", "left"])
    assert "text-align" not in table.data
    with pytest.raises(ValueError, match="for each of 2 columns"):
        tables.html_table(["linen", "NNX"], [], align=["left"])
