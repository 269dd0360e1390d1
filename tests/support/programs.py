"""Small real programs that more than one test reads."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def scanned_step(mesh, layers=3):
    """The gradient of a scanned two-matmul layer with the main guide's layout, compiled."""

    def forward(w, x):
        def layer(h, wl):
            y = jax.nn.relu(h @ wl[0])
            y = jax.lax.with_sharding_constraint(y, NamedSharding(mesh, P("data", "model")))
            return y @ wl[1], None

        return jnp.mean(jax.lax.scan(layer, x, w)[0] ** 2)

    def put(shape, spec):
        return jax.device_put(jnp.ones(shape), NamedSharding(mesh, spec))

    w = (put((layers, 32, 64), P(None, None, "model")), put((layers, 64, 32), P(None, "model")))
    x = put((16, 32), P("data", None))
    return jax.jit(jax.grad(forward)).lower(w, x).compile()
