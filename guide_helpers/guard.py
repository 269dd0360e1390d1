"""Guard a training step's layout across upgrades: what the compiler decided, recorded, compared.

The page when_sharding_breaks writes a test file that readers copy (the site's own copy is
tests/layout_guard/test_layout_guard.py); this module is what that file calls.

- `record(lowered, mesh)`: compile a lowered step and return what was decided: each argument's
  and each output's PartitionSpec and bytes per device, by path, and the step's collectives
  counted by kind, mesh axes and pass (`guide_helpers.hlo`, loops counted once per trip).
- `changes(golden, key, now)`: "" when `now` is what `golden[key]` holds; else what changed,
  part by part, each line as recorded ("-") and as compiled now ("+"), or a line saying the key
  is not recorded. With the environment variable UPDATE_LAYOUTS set it records `now` under
  `key` instead and returns "".
- `read_golden(path)` and `write_golden(path, golden)`: the JSON file kept beside the test,
  sorted, one entry a line, so that its own diff in a review reads like the test's.
"""

import difflib
import json
import os

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from guide_helpers import hlo

UPDATE = "UPDATE_LAYOUTS"


def _layouts(shapes, shardings):
    """{path: "spec, bytes a device"} of a tree of shapes and the tree of its shardings."""
    found = {}
    leaves = zip(jax.tree_util.tree_flatten_with_path(shapes)[0], jax.tree.leaves(shardings),
                 strict=True)  # fmt: skip
    for (path, shape), sharding in leaves:
        shard = int(np.prod(sharding.shard_shape(shape.shape))) * shape.dtype.itemsize
        spec = _trimmed(getattr(sharding, "spec", sharding))
        found[jax.tree_util.keystr(path, simple=True, separator=".")] = f"{spec}, {shard:,} B"
    return found


def _trimmed(spec):
    """A PartitionSpec without trailing Nones (P('model', None) is P('model'), which a compiled
    output may name either way), any other sharding as it is."""
    if not isinstance(spec, P):
        return spec
    entries = list(spec)
    while entries and entries[-1] is None:
        entries.pop()
    return P(*entries)


def _collectives(compiled, mesh):
    found = hlo.by_axis(hlo.collectives(compiled), mesh)
    return {f"{kind} over {axes}, {when}": n for (kind, axes, when), n in sorted(found.items())}


def record(lowered, mesh):
    """What the compiler decided for a lowered step on `mesh`: layouts in and out, collectives."""
    compiled = lowered.compile()
    return {  # [0]: the positional arguments
        "arguments": _layouts(compiled.args_info[0], compiled.input_shardings[0]),
        "outputs": _layouts(compiled.out_info, compiled.output_shardings),
        "collectives": _collectives(compiled, mesh),
    }


def _diff(recorded, now):
    """Each part's changed lines: "- " what was recorded, "+ " what is compiled now."""
    out = []
    for part in sorted(recorded.keys() | now.keys()):
        lines = [[f"{k}: {v}" for k, v in sorted(r.get(part, {}).items())]
                 for r in (recorded, now)]  # fmt: skip
        changed = [line for line in difflib.unified_diff(*lines, n=0, lineterm="")
                   if line[:1] in "-+" and line[:3] not in ("---", "+++")]  # fmt: skip
        out += [part] * bool(changed) + [f"  {line[0]} {line[1:]}" for line in changed]
    return out


def changes(golden, key, now):
    """What changed in `key`'s record, "" if nothing; under UPDATE_LAYOUTS, record it."""
    if os.environ.get(UPDATE):
        golden[key] = now
        return ""
    if key not in golden:
        return f"{key}: not recorded; {UPDATE}=1 records it"
    if now == golden[key]:
        return ""
    meant = f"(if meant: {UPDATE}=1 records it; review the file's diff)"
    return "\n".join([f"{key}: the layout changed {meant}", *_diff(golden[key], now)])


def read_golden(path):
    return json.loads(path.read_text()) if path.exists() else {}


def write_golden(path, golden):
    path.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
