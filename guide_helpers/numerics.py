"""How far a result is from its reference, as one number that a page's assert bounds.

The pages check every sharded program against the one-device answer to a stated tolerance, never
by printing raw digits (those differ between machines):

- `relative_error`: the largest difference of two arrays, or of two pytrees leaf by leaf, divided
  by the largest magnitude of the expected leaf; the largest over the leaves, as a float.
- `output_and_grad_errors`: `relative_error` of a function's output against a reference
  function's, then of the gradients of a scalar of each output with respect to every argument
  (the scalar, `sum(sin(output))`, weighs every entry differently, so that a wrong entry cannot
  cancel out).
"""

import jax
import jax.numpy as jnp
import numpy as np


def _leaf_error(found, expected):
    found, expected = np.asarray(found, np.float64), np.asarray(expected, np.float64)
    if found.shape != expected.shape:
        raise ValueError(f"shapes differ: found {found.shape}, expected {expected.shape}")
    difference, scale = np.max(np.abs(found - expected)), np.max(np.abs(expected))
    if scale == 0:
        return 0.0 if difference == 0 else float("inf")
    return float(difference / scale)


def relative_error(found, expected):
    """max |found - expected| / max |expected|, leaf by leaf; the largest over the leaves.

    `found` and `expected` are arrays (or scalars), or pytrees of the same structure.
    """
    return max(jax.tree.leaves(jax.tree.map(_leaf_error, found, expected)))


def output_and_grad_errors(f, reference, *args):
    """[the output's relative error, then the gradient's for each argument], f against
    reference, the gradients of sum(sin(output)) with respect to every argument."""
    every = tuple(range(len(args)))
    scalar = lambda g: lambda *a: jnp.sum(jnp.sin(g(*a)))  # noqa: E731
    pairs = [(f(*args), reference(*args))]
    pairs += zip(jax.grad(scalar(f), every)(*args), jax.grad(scalar(reference), every)(*args))
    return [relative_error(found, expected) for found, expected in pairs]
