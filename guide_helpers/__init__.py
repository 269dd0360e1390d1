"""Plumbing shared by the site's guides, so that each page shows its lesson and not this.

By kind, each module tested once in tests/unit/test_MODULE.py (CONTRIBUTING.md):

- Plumbing: `devices` (`require_devices`, the setup cell's device check), `launch` (one script
  as several JAX processes, bounded in time), `child` (a child Python whose errors and warnings
  read alike on every Python), `workdir` (a page's scratch directory and `%%to_workdir`),
  `tables` (HTML tables and byte formatting), `numerics` (a result's relative error against its
  reference, and its gradients').
- Models: `models` (the main guide's MLP), `training` (its state, loss and steps, for the pages
  whose lesson is not the step), `transformer` (the NNX transformer), `llama` (its
  Llama-shaped variant: grouped-query attention, a gated MLP), `llama_family` (a whole Llama-shaped
  decoder written as checkpoints lay it out, the one-chip tools' second family), `layouts` (the
  rules that map the models' logical axes to a mesh), `path_rules` (a layout by parameter paths,
  for a model with no annotations), `pipeline` (the transformer's blocks stacked by stage, a run
  of layers, the head's loss: the pipeline guide's lesson, for the pages after it), `onechip`
  (the transformer's step on one chip, as measured on a real TPU), `offload` (that step with
  Adam's moments or the saved activations in the host's memory).
- Program readers: `hlo` (what a compiled step communicates and computes, from its HLO), `tpu`
  (the TPU compiler without a TPU), `buffers` (what fills a compiled or refused program's memory,
  buffer by buffer, from XLA's buffer assignment), `profile` (a trace and a memory profile of a
  step that ran).
- Cost models: `roofline` (chips, links and a step's time), `plan` (a plan's memory, FLOPs,
  bytes per link and time, from formulas), `schedules` (a pipeline schedule played tick by
  tick: its bubble and the micro-batches it holds).
- Teaching: `figures` (drawn from what the page asserts on), `exercises` (a reader's answer,
  compiled and graded).
"""

from guide_helpers.devices import require_devices

__all__ = ["require_devices"]
