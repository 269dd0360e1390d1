"""Lay out a model you were given, one that carries no sharding annotations, by its parameters'
paths: the page shard_your_model teaches it; this module holds what the page uses twice.

A rule is `(pattern, spec)`: a parameter whose path `re.search`es the pattern takes the spec of
the first rule that matches. A path is written as a reader sees it, `blocks/0/qkv/kernel`:
dictionary keys, attribute names and list indices joined by `/`, without the `value` that an
`nnx.Variable` adds at the end of every leaf's key path (a rule on the raw key path's last key
would match that `value` and nothing else). Because `re.search` finds the pattern anywhere, a rule
on `qkv/kernel` also lays out Adam's moments of that kernel (`.../mu/blocks/0/qkv/kernel`).

- `path_of(key_path)`: the path of a leaf, written as above.
- `specs_by_path(tree, rules)`: the tree of `PartitionSpec`s the rules give. It refuses, with the
  paths to fix: a rule that matches no leaf (a typo would otherwise replicate silently), a leaf
  that no rule matches (end with `(".*", P())` to replicate the rest on purpose), and a spec with
  more entries than its leaf has dimensions.
- `zip_by_path(tree, other)`: `(path, leaf, other's leaf)` for two trees of one structure, such
  as a state and its specs; trees with different numbers of leaves are refused.
- `mismatches(tree, specs)`: `(path, expected, actual)` for every array whose sharding is not the
  one its spec names: empty when the layout is what the rules say.
"""

import re

import jax
from jax.sharding import PartitionSpec as P


def path_of(key_path):
    """`blocks/0/qkv/kernel` for the key path of that leaf, NNX's trailing `value` left out."""
    names = []
    for key in key_path:
        name = getattr(key, "key", getattr(key, "name", getattr(key, "idx", key)))
        names.append(str(name))
    if isinstance(key_path[-1], jax.tree_util.GetAttrKey) and names[-1] == "value":
        names.pop()
    return "/".join(names)


class RuleError(ValueError):
    """Rules that do not lay out every parameter exactly once."""


def specs_by_path(tree, rules):
    """The `PartitionSpec` of every leaf of `tree`: the first of `rules` whose pattern its path
    contains. Raises `RuleError` for a rule that matches nothing, a leaf no rule matches, or a
    spec longer than its leaf's rank."""
    compiled = [(re.compile(pattern), spec) for pattern, spec in rules]
    used, unmatched, too_long = set(), [], []

    def spec_of(key_path, leaf):
        path = path_of(key_path)
        for i, (pattern, spec) in enumerate(compiled):
            if pattern.search(path):
                used.add(i)
                if len(spec) > leaf.ndim:
                    too_long.append(f"{path} {tuple(leaf.shape)}: {spec}")
                return spec
        unmatched.append(path)
        return P()

    specs = jax.tree_util.tree_map_with_path(spec_of, tree)
    unused = [rules[i][0] for i in range(len(rules)) if i not in used]
    problems = []
    if unused:
        some = [path_of(p) for p, _ in jax.tree_util.tree_leaves_with_path(tree)][:3]
        problems.append(f"rules that match no parameter: {unused} (paths look like {some})")
    if unmatched:
        problems.append(
            f"parameters no rule matches: {unmatched[:4]}"
            + (f" and {len(unmatched) - 4} more" if len(unmatched) > 4 else "")
            + ' (end the rules with (".*", P()) to replicate the rest)'
        )
    if too_long:
        problems.append(f"specs longer than their parameter's rank: {too_long}")
    if problems:
        raise RuleError("; ".join(problems))
    return specs


def mismatches(tree, specs):
    """`(path, expected spec, actual spec)` for each array of `tree` laid out otherwise than its
    spec in `specs` says (trailing `None`s do not count: `P("x", None)` is `P("x")`)."""
    found = []
    for path, leaf, spec in zip_by_path(tree, specs):
        actual = _trimmed(getattr(leaf.sharding, "spec", P()))
        if actual != _trimmed(spec):
            found.append((path, spec, actual))
    return found


def _trimmed(spec):
    """`spec` without its trailing `None`s."""
    entries = list(spec)
    while entries and entries[-1] is None:
        entries.pop()
    return P(*entries)


def is_spec(x):
    return isinstance(x, P)


def zip_by_path(tree, other):
    """`(path, leaf, other's leaf)` for each leaf of two trees of the same structure (a tree of
    `PartitionSpec`s has each spec as one leaf); refuses trees with different numbers of leaves."""
    pairs = jax.tree_util.tree_leaves_with_path(tree)
    others = jax.tree.leaves(other, is_leaf=is_spec)
    return [(path_of(p), leaf, b) for (p, leaf), b in zip(pairs, others, strict=True)]
