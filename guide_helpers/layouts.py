"""Layouts of the site's logical model: rules that map its dimension names to mesh axes.

`make_rules(batch=..., embed=..., hidden=...)` writes one rule per logical name of the model
(`guide_helpers.models.LogicalMLP`); `pieces(mesh_shape, rules)` says how many pieces a layout on
a ('data', 'model') mesh of that shape cuts batch, embed and hidden into.
"""


def make_rules(batch=None, embed=None, hidden=None):
    """One rule per logical name of the model; None leaves that dimension whole."""
    return (("batch", batch), ("embed", embed), ("hidden", hidden), ("layer", None))


def pieces(mesh_shape, rules):
    """(n_batch, n_embed, n_hidden): the pieces a layout cuts batch, embed and hidden into."""
    size = {"data": mesh_shape[0], "model": mesh_shape[1], None: 1}
    return tuple(size[axis] for dim, axis in rules if dim != "layer")
