"""guide_helpers.numerics: relative errors of arrays and pytrees, and of a function's output and
gradients against a reference function's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from guide_helpers.numerics import output_and_grad_errors, relative_error


def test_relative_error_is_the_largest_difference_over_the_largest_value():
    expected = np.array([[1.0, -4.0], [2.0, 0.5]], np.float32)
    assert relative_error(expected, expected) == 0.0
    found = expected + np.array([[0.0, 0.0], [0.002, 0.0]], np.float32)
    assert relative_error(found, expected) == pytest.approx(0.002 / 4, rel=1e-4)
    assert relative_error(3.03, 3.0) == pytest.approx(0.01)


def test_a_perturbed_input_gives_a_larger_error():
    expected = jnp.linspace(-1.0, 1.0, 16)
    close = expected * (1 + 1e-7)
    far = close.at[5].add(1e-3)
    assert relative_error(close, expected) < 1e-6 < 1e-4 < relative_error(far, expected)


def test_relative_error_takes_the_worst_leaf_of_a_pytree():
    expected = {"a": np.ones(3), "b": [np.full(2, 100.0), np.array(2.0)]}
    found = {"a": np.ones(3) * 1.01, "b": [np.full(2, 100.5), np.array(2.0)]}
    assert relative_error(found, expected) == pytest.approx(0.01)  # a's, not b's 0.005
    with pytest.raises(ValueError):
        relative_error({"a": np.ones(3)}, expected)  # another structure
    with pytest.raises(ValueError, match="shapes differ"):
        relative_error(np.ones(3), np.ones((3, 1)))


def test_output_and_grad_errors_sees_a_wrong_gradient():
    reference = lambda x, w: jnp.tanh(x @ w)  # noqa: E731
    twin = lambda x, w: jnp.tanh(w.T @ x.T).T  # noqa: E731
    x, w = jnp.linspace(-1.0, 1.0, 12).reshape(3, 4), jnp.linspace(0.5, -0.5, 8).reshape(4, 2)
    errors = output_and_grad_errors(twin, reference, x, w)
    assert len(errors) == 3 and max(errors) < 1e-6  # the output, then x's and w's gradients
    # The same values, but no gradient with respect to w: only w's error grows, to 1.
    cut = lambda x, w: jnp.tanh(x @ jax.lax.stop_gradient(w))  # noqa: E731
    errors = output_and_grad_errors(cut, reference, x, w)
    assert errors[0] < 1e-6 and errors[1] < 1e-6 and errors[2] == pytest.approx(1.0)
