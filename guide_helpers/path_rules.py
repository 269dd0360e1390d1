"""Lay out a model you were given, one that carries no sharding annotations, by its parameters'
paths: the page shard_your_model teaches it; this module holds what the page uses twice.

A rule is `(pattern, spec)`: a parameter whose path `re.search`es the pattern takes the spec of
the first rule that matches. A path is written as a reader sees it, `blocks/0/qkv/kernel`:
dictionary keys, attribute names and list indices joined by `/`, without the `value` that an
`nnx.Variable` adds at the end of every leaf's key path (a rule on the raw key path's last key
would match that `value` and nothing else). Because `re.search` finds the pattern anywhere, a rule
on `qkv/kernel` also lays out Adam's moments of that kernel (`.../mu/blocks/0/qkv/kernel`).

- `path_of(key_path)`: the path of a leaf, written as above.
- `specs_by_path(tree, rules, mesh=None)`: the tree of `PartitionSpec`s the rules give. It
  refuses, with the paths to fix: a rule that matches no leaf (a typo would otherwise replicate
  silently), a leaf that no rule matches (end with `(".*", P())` to replicate the rest on
  purpose), and a spec with more entries than its leaf has dimensions. Given the `mesh` (or under
  `jax.set_mesh`), it also refuses a split that the devices do not divide (`undivided`) and a
  split that cuts a head in two.
- `Heads(spec, head_dim, dim=-1)`: a rule's spec whose dimension `dim` comes in heads of
  `head_dim` columns, as a checkpoint's flat `k_proj` kernel `[embed, kv_heads * head_dim]` does.
  The devices that split `dim` must divide the heads, not only the columns; a split that would
  give a device part of a head is refused with the parameter, its heads and the devices, and what
  works instead (keep it whole, or repeat each head until the devices divide them).
- `undivided(tree, specs, mesh)`: `(path, shape, spec, why)` for every dimension a spec splits
  over more devices than divide it (a 50,257-token vocabulary over 8): what to pad or keep whole.
- `zip_by_path(tree, other)`: `(path, leaf, other's leaf)` for two trees of one structure, such
  as a state and its specs; trees with different numbers of leaves are refused.
- `mismatches(tree, specs)`: `(path, expected, actual)` for every array whose sharding is not the
  one its spec names: empty when the layout is what the rules say.
"""

import math
import re
from typing import NamedTuple

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
    """Rules that do not lay out every parameter exactly once, or that split it unevenly."""


class Heads(NamedTuple):
    """A rule's `spec` for a parameter whose dimension `dim` is `head_dim`-column heads: the
    devices splitting `dim` must divide the heads, so that each holds whole heads."""

    spec: P
    head_dim: int
    dim: int = -1


def _devices(mesh, entry):
    """How many devices split a dimension whose spec entry is `entry` (None, a name, a tuple),
    and their axes as a message names them ("'kv' x 'rep'")."""
    names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
    return math.prod(mesh.shape[name] for name in names), " x ".join(f"'{n}'" for n in names)


def _some(paths):
    """The first paths of a list, and how many more."""
    more = f" and {len(paths) - 4} more" if len(paths) > 4 else ""
    return ", ".join(paths[:4]) + more


def _cut_head(shape, rule, mesh):
    """What a `Heads` rule that gives a device part of a head does, or None."""
    dim = rule.dim % len(shape)
    entries = list(rule.spec) + [None] * (len(shape) - len(rule.spec))
    devices, axes = _devices(mesh, entries[dim])
    heads, left = divmod(shape[dim], rule.head_dim)
    if left:
        return f"{shape}: {shape[dim]} columns are not whole heads of {rule.head_dim}"
    if heads % devices == 0:
        return None
    repeat = devices // math.gcd(heads, devices)
    per = shape[dim] / devices / rule.head_dim
    return (
        f"{shape}: {rule.spec} splits its {heads} heads of {rule.head_dim} columns over "
        f"{devices} devices of {axes}, {per:g} of a head each; keep that dimension whole (every "
        f"device holds the {heads} heads), or, for keys and values, repeat each head {repeat} "
        f"times ({heads * repeat} heads, {heads * repeat // devices} a device: the copy its query "
        f"heads use), or split over devices that divide {heads}"
    )


def undivided(tree, specs, mesh):
    """`(path, shape, spec, why)` for each dimension of `tree`'s arrays that its spec splits over
    a number of devices that does not divide it."""
    found = []
    for path, leaf, spec in zip_by_path(tree, specs):
        for dim, (size, entry) in enumerate(zip(leaf.shape, spec)):
            devices, axes = _devices(mesh, entry)
            if size % devices:
                why = f"dimension {dim} ({size}) over {devices} devices of {axes}"
                found.append((path, tuple(leaf.shape), spec, why))
    return found


def specs_by_path(tree, rules, mesh=None):
    """The `PartitionSpec` of every leaf of `tree`: the first of `rules` whose pattern its path
    contains. Raises `RuleError` for a rule that matches nothing, a leaf no rule matches, or a
    spec longer than its leaf's rank; with a `mesh` (default: the one `jax.set_mesh` set, if
    any), for a split the devices do not divide and a `Heads` rule that cuts a head."""
    if mesh is None and not jax.sharding.get_abstract_mesh().empty:
        mesh = jax.sharding.get_abstract_mesh()
    compiled = [(re.compile(pattern), spec) for pattern, spec in rules]
    used, unmatched, too_long, cut = set(), [], [], {}

    def spec_of(key_path, leaf):
        path = path_of(key_path)
        for i, (pattern, rule) in enumerate(compiled):
            if pattern.search(path):
                used.add(i)
                spec = rule.spec if isinstance(rule, Heads) else rule
                if len(spec) > leaf.ndim:
                    too_long.append(f"{path} {tuple(leaf.shape)}: {spec}")
                elif isinstance(rule, Heads) and mesh is not None:
                    if what := _cut_head(tuple(leaf.shape), rule, mesh):
                        cut.setdefault(what, []).append(path)
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
    problems += [f"a split that cuts a head: {_some(paths)} {what}" for what, paths in cut.items()]
    if mesh is not None and not too_long:
        uneven = [f"{path} {shape}: {why}" for path, shape, _, why in undivided(tree, specs, mesh)]
        if uneven:
            problems.append(
                f"splits the devices do not divide: {uneven} (pad the dimension to a multiple, "
                "or keep it whole)"
            )
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
