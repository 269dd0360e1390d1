"""The site's model, as the main guide (scale_up_a_flax_model) writes it, for the other pages.

The main guide defines these classes in its own cells, because writing them is its lesson;
tests/site/test_sources.py checks that its definitions and these stay identical.

- `DotReluDot`: relu(x @ W1) @ W2 with W1[embed, hidden@model] and W2[hidden@model, embed],
  so that each layer needs one all-reduce over 'model'.
- `MLP`: `num_layers` of them, stacked with `nn.scan` (or, with `use_scan=False`, a for-loop).
- `LogicalDotReluDot`, `LogicalMLP`: the same model with logical axis names ('batch', 'embed',
  'hidden', 'layer'), mapped to the mesh by `nn.logical_axis_rules`.
"""

import flax.linen as nn
import jax
from jax.sharding import PartitionSpec as P


class DotReluDot(nn.Module):
    hidden: int

    @nn.compact
    def __call__(self, x, _):
        init = nn.initializers.xavier_normal()
        W1 = self.param(
            "W1", nn.with_partitioning(init, (None, "model")), (x.shape[-1], self.hidden)
        )
        y = jax.nn.relu(x @ W1)
        y = jax.lax.with_sharding_constraint(y, P("data", "model"))
        W2 = self.param(
            "W2", nn.with_partitioning(init, ("model", None)), (self.hidden, x.shape[-1])
        )
        # (carry, per-layer output): the signature nn.scan expects; there is no per-layer output.
        return y @ W2, None


class MLP(nn.Module):
    num_layers: int
    hidden: int
    use_scan: bool = True

    @nn.compact
    def __call__(self, x):
        if self.use_scan:
            Layers = nn.scan(
                DotReluDot,
                length=self.num_layers,
                variable_axes={"params": 0},
                split_rngs={"params": True},
                metadata_params={nn.PARTITION_NAME: None},
            )
            x, _ = Layers(self.hidden, name="layers")(x, None)
        else:
            for i in range(self.num_layers):
                x, _ = DotReluDot(self.hidden, name=f"layer_{i}")(x, None)
        return x


class LogicalDotReluDot(nn.Module):
    hidden: int

    @nn.compact
    def __call__(self, x, _):
        init = nn.initializers.xavier_normal()
        W1 = self.param(
            "W1",
            nn.with_logical_partitioning(init, ("embed", "hidden")),
            (x.shape[-1], self.hidden),
        )
        y = jax.nn.relu(x @ W1)
        y = nn.with_logical_constraint(y, ("batch", "hidden"))
        W2 = self.param(
            "W2",
            nn.with_logical_partitioning(init, ("hidden", "embed")),
            (self.hidden, x.shape[-1]),
        )
        return y @ W2, None


class LogicalMLP(nn.Module):
    num_layers: int
    hidden: int

    @nn.compact
    def __call__(self, x):
        Layers = nn.scan(
            LogicalDotReluDot,
            length=self.num_layers,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            metadata_params={nn.PARTITION_NAME: "layer"},
        )
        x, _ = Layers(self.hidden, name="layers")(x, None)
        return x
