"""guide_helpers.layouts: logical-axis rules and the pieces they cut."""

from guide_helpers import hlo


def test_layouts_name_every_dimension_and_count_its_pieces():
    from guide_helpers.layouts import make_rules, pieces

    rules = make_rules(batch="data", hidden="model")
    assert dict(rules) == {"batch": "data", "embed": None, "hidden": "model", "layer": None}
    assert pieces((2, 4), rules) == (2, 1, 4)
    assert pieces((8, 1), make_rules(batch="data", embed="data")) == (8, 8, 1)
    assert hlo.ring(4, 1000) == 750 and hlo.ring(8, 800, passes=2) == 1400
