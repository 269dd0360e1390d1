"""Plumbing shared by the site's guides, so that each page shows its lesson and not this.

- `require_devices`: the setup check: 8 devices, emulated on the CPU where the runtime has fewer
  accelerators, or a message that says what to do.
- `guide_helpers.compiled`: what a compiled step communicates and computes, read from its HLO.
- `guide_helpers.launch`: run one script as several JAX processes, bounded in time.
- `guide_helpers.child`: a child Python whose errors and warnings read alike on every Python.
- `guide_helpers.tables`: HTML tables and byte formatting for the pages.
- `guide_helpers.figures`: figures of a layout's blocks and a step's collectives, from the arrays.
- `guide_helpers.exercises`: the pages' exercises, graded on the compiled program.
- `guide_helpers.layouts`: the rules of a layout of the site's model, and its pieces.
- `guide_helpers.roofline`: real chips' figures, with sources, and step times from them.
- `guide_helpers.workdir`: a page's temporary directory and its `%%to_workdir` cell magic.

Each part is tested once, in tests/test_guide_helpers.py.
"""

from guide_helpers.devices import require_devices

__all__ = ["require_devices"]
