"""guide_helpers, the plumbing the guides share, tested once here.

The compiled-program readers run on real programs compiled in this process (8 emulated CPU
devices) and on small HLO texts written here for the cases a real program here does not show.
The launcher runs real child processes.
"""

import ast
import os
import signal
import socket
import textwrap
import time
from types import SimpleNamespace

import jax
import jupytext
import pytest
from conftest import DOCS, ROOT, guide_names

from guide_helpers import compiled as gc
from guide_helpers import require_devices, tables
from guide_helpers.launch import (
    LaunchError,
    Signal,
    launch,
    like_srun,
    port_is_free,
    show,
    slurm_port,
    without_gloo_messages,
    xla_flags,
)
from guide_helpers.workdir import make_workdir

# Collected before any test runs, so before JAX starts its backend in this process.
jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


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


def test_collectives_of_a_scanned_step_run_once_per_layer(mesh):
    step = scanned_step(mesh, layers=3)
    rows = gc.collectives(step)
    assert {(r.kind, r.where, r.per_step) for r in rows} == {("all-reduce", "loop", 3)}
    # Forward and backward activation sums over 'model' (groups of 4), the weight gradients
    # over 'data' (groups of 2): the main guide's pattern.
    assert sorted((r.group, r.nbytes) for r in rows) == [
        (2, 2 * 32 * 16 * 4), (4, 8 * 32 * 4), (4, 8 * 32 * 4),
    ]  # fmt: skip
    assert gc.per_step(rows) == {("all-reduce", 1024, 4): 6, ("all-reduce", 4096, 2): 3}
    assert gc.trip_counts(step) == [3, 3]
    assert all("while/body" in r.op_name for r in rows)
    # The forward pass's sum over 'model'; the backward pass's over 'model' and over 'data'.
    assert sorted((r.direction, r.group) for r in rows) == [
        ("backward", 2), ("backward", 4), ("forward", 4),
    ]  # fmt: skip


def test_show_collectives_prints_one_line_each(mesh, capsys):
    gc.show_collectives(gc.collectives(scanned_step(mesh)))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(
        "all-reduce" in line and "x3 per step" in line for line in lines
    )
    assert sum("backward" in line for line in lines) == 2
    gc.show_collectives([])
    assert capsys.readouterr().out.strip() == "no collectives"


def test_matmul_flops_count_every_layer_and_the_backward_pass(mesh):
    # Per device: batch 8, 32 x 16 columns then 16 x 32; forward 2 dots, backward 4, 3 layers.
    per_layer_dot = 2 * 8 * 32 * 16
    assert gc.matmul_flops(scanned_step(mesh, layers=3)) == 3 * 6 * per_layer_dot
    single = jax.jit(jnp.matmul).lower(jnp.ones((16, 256)), jnp.ones((256, 1024))).compile()
    assert gc.matmul_flops(single) == 2 * 16 * 256 * 1024
    assert gc.collectives(single) == []


def test_program_size_grows_with_an_unrolled_loop_not_with_a_scan():
    def unrolled(x, n):
        for _ in range(n):
            x = jnp.sin(x) @ x
        return x

    def scanned(x, n):
        return jax.lax.scan(lambda c, _: (jnp.sin(c) @ c, None), x, None, length=n)[0]

    x = jnp.ones((8, 8))

    def size(f, n):
        return gc.instruction_count(jax.jit(f, static_argnums=1).lower(x, n).compile())

    assert size(unrolled, 4) > size(unrolled, 2) > size(unrolled, 1)
    assert size(scanned, 4) == size(scanned, 8)


def test_memory_counts_donated_buffers_once():
    x = jnp.ones((256, 256))
    kept = gc.memory(jax.jit(lambda a: a * 2).lower(x).compile())
    donated = gc.memory(jax.jit(lambda a: a * 2, donate_argnums=0).lower(x).compile())
    assert kept.arguments == kept.outputs == donated.arguments == 256 * 256 * 4
    assert kept.aliased == 0 and donated.aliased == 256 * 256 * 4
    assert donated.peak_bound == kept.peak_bound - 256 * 256 * 4


# A program as XLA prints it, cut down: a while loop of known trip count 5 whose body holds an
# all-reduce, and an all-gather that XLA hoisted out of that loop into the entry computation
# (its op_name still says while/body), applied directly to the step's argument.
HOISTED = """\
HloModule step

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

%body (p: (s32[], f32[4,8])) -> (s32[], f32[4,8]) {
  %p = (s32[], f32[4,8]{1,0}) parameter(0)
  %x = f32[4,8]{1,0} get-tuple-element(%p), index=1
  %ar = f32[4,8]{1,0} all-reduce(%x), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, \
to_apply=%add, metadata={op_name="jit(step)/while/body/dot_general"}
  %i = s32[] get-tuple-element(%p), index=0
  ROOT %t = (s32[], f32[4,8]{1,0}) tuple(%i, %ar)
}

%cond (q: (s32[], f32[4,8])) -> pred[] {
  %q = (s32[], f32[4,8]{1,0}) parameter(0)
  ROOT %c = pred[] constant(true)
}

ENTRY %main (w: bf16[2,8]) -> (s32[], f32[4,8]) {
  %w = bf16[2,8]{1,0} parameter(0), metadata={op_name="state.params['W1']"}
  %ag = bf16[4,8]{1,0} all-gather(%w), channel_id=2, replica_groups=[4,2]<=[8], dimensions={0}, \
metadata={op_name="jit(step)/while/body/dynamic_slice"}
  %z = f32[4,8]{1,0} convert(%ag)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4,8]{1,0}) tuple(%zero, %z)
  ROOT %loop = (s32[], f32[4,8]{1,0}) while(%init), condition=%cond, body=%body, \
backend_config={"known_trip_count":{"n":"5"}}
}
""".replace("\\\n", "")


def test_where_is_decided_by_the_computation_not_by_the_op_name():
    program = SimpleNamespace(as_text=lambda: HOISTED)
    gathered, reduced = sorted(gc.collectives(program))
    assert gathered.kind == "all-gather" and gathered.where == "entry"
    assert "while/body" in gathered.op_name  # the name says loop; the computation says entry
    assert (gathered.per_step, gathered.group, gathered.nbytes) == (1, 2, 4 * 8 * 2)
    assert gathered.operand == "state.params['W1']" and gathered.shape == "bf16[4,8]"
    assert (reduced.where, reduced.per_step, reduced.group) == ("loop", 5, 4)
    assert reduced.operand == "" and reduced.groups == "{{0,1,2,3},{4,5,6,7}}"
    assert gc.trip_counts(program) == [5]


@pytest.mark.parametrize(
    "attrs, size",
    [
        ("replica_groups={{0,1,2,3},{4,5,6,7}}, to_apply=%add", 4),
        ("replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}", 2),
        ("replica_groups=mesh['data'=2,'model'=4] {'model'}, to_apply=%add", 4),
        ("replica_groups=mesh['data'=2,'model'=4] {'data','model'}, to_apply=%add", 8),
        ("source_target_pairs={{0,1},{1,0}}", 2),
    ],
)
def test_group_size_reads_every_notation(attrs, size):
    assert gc.group_size(attrs) == size


def test_group_size_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="no replica groups"):
        gc.group_size("dimensions={0}")


def test_layouts_name_every_dimension_and_count_its_pieces():
    from guide_helpers.layouts import make_rules, pieces

    rules = make_rules(batch="data", hidden="model")
    assert dict(rules) == {"batch": "data", "embed": None, "hidden": "model", "layer": None}
    assert pieces((2, 4), rules) == (2, 1, 4)
    assert pieces((8, 1), make_rules(batch="data", embed="data")) == (8, 8, 1)
    assert gc.ring(4, 1000) == 750 and gc.ring(8, 800, passes=2) == 1400


def test_sent_per_device_is_the_ring_model():
    def row(kind, nbytes, group, per_step):
        return gc.Collective(kind, "", nbytes, group, "", "loop", per_step, "", "")

    # All-reduce: 2 (n-1)/n; all-gather and reduce-scatter: (n-1)/n; a permute: all of it.
    assert gc.sent_per_device([row("all-reduce", 1000, 4, 2)]) == 2 * 2 * 1000 * 3 / 4
    assert gc.sent_per_device([row("all-gather", 800, 8, 1)]) == 700
    # A reduce-scatter's result is one shard of 800 bytes: each device sends the other shard.
    assert gc.sent_per_device([row("reduce-scatter", 800, 2, 3)]) == 3 * 800
    assert gc.sent_per_device([row("reduce-scatter", 100, 8, 1)]) == 700
    assert gc.sent_per_device([row("collective-permute", 64, 2, 4)]) == 256
    assert gc.shape_bytes("(f32[2,3], bf16[4], pred[])") == 24 + 8 + 1
    assert gc.shape_bytes("bool[2,4]") == 8  # JAX's name, as print_saved_residuals prints it


def test_require_devices_names_the_fix_for_too_few_accelerators(monkeypatch):
    one_gpu = [SimpleNamespace(platform="gpu")]
    monkeypatch.setattr("guide_helpers.devices.jax.devices", lambda backend=None: one_gpu)
    with pytest.raises(RuntimeError, match=r"needs 8 devices, found 1\. This runtime has 1 GPU"):
        with require_devices(8):
            pass


def test_require_devices_on_cpu_counts_the_cpu_devices_of_a_gpu_host(monkeypatch, capsys):
    gpu, cpu = SimpleNamespace(platform="gpu"), SimpleNamespace(platform="cpu")
    host = {None: [gpu] * 8, "cpu": [cpu] * 16}
    monkeypatch.setattr("guide_helpers.devices.jax.devices", lambda backend=None: host[backend])
    with require_devices(16, platform="cpu"):
        pass
    assert capsys.readouterr().out == "16 devices, platform cpu\n"
    with pytest.raises(RuntimeError, match=r"needs 16 devices, found 8\. This runtime has 8 GPU"):
        with require_devices(16):
            pass


def test_require_devices_passes_other_errors_through_and_prints_the_count(capsys):
    with pytest.raises(RuntimeError, match="unrelated"):
        with require_devices(8):
            raise RuntimeError("unrelated")
    with require_devices(8):
        pass
    assert capsys.readouterr().out == "8 devices, platform cpu\n"


def test_tables_escape_and_align():
    table = tables.html_table(["layout", "bytes"], [["<data>", tables.mib(3 * 2**19)]])
    assert table.data == (
        '<table><tr><th>layout</th><th style="text-align: right">bytes</th></tr>'
        '<tr><td>&lt;data&gt;</td><td style="text-align: right">1.50 MiB</td></tr></table>'
    )


def test_tables_align_text_columns_left_when_asked():
    table = tables.html_table(["linen", "NNX"], [["a", "b"]], align=["left", "left"])
    assert "text-align" not in table.data
    with pytest.raises(ValueError, match="for each of 2 columns"):
        tables.html_table(["linen", "NNX"], [], align=["left"])


def python_of(notebook):
    """The notebook's code cells as one Python source, IPython magics turned into calls."""
    from IPython.core.inputtransformer2 import TransformerManager

    transform = TransformerManager().transform_cell
    return "\n".join(transform(c.source) for c in notebook.cells if c.cell_type == "code")


def test_the_main_guide_defines_the_model_that_guide_helpers_shares():
    """The main guide writes the model as its lesson; other pages import guide_helpers.models.
    Both must stay the same, class by class."""

    def classes(source):
        return {
            node.name: ast.dump(node)
            for node in ast.parse(source).body
            if isinstance(node, ast.ClassDef)
        }

    shared = classes((ROOT / "guide_helpers" / "models.py").read_text())
    guide = jupytext.read(DOCS / "scale_up_a_flax_model.md")
    in_guide = classes(python_of(guide))
    for name, dump in shared.items():
        assert in_guide.get(name) == dump, (
            f"class {name} of docs/scale_up_a_flax_model.md differs from guide_helpers/models.py"
        )


def top_level(source, kinds=(ast.ClassDef, ast.FunctionDef)):
    """{name: its AST dump} of the module's top-level classes and functions."""
    body = ast.parse(source).body
    return {node.name: ast.dump(node) for node in body if isinstance(node, kinds)}


# The transformer guide writes the site's second model out; guide_helpers/transformer.py shares it.
TRANSFORMER_LESSON = set(top_level((ROOT / "guide_helpers" / "transformer.py").read_text()))


def test_the_transformer_guide_defines_the_model_that_guide_helpers_shares():
    shared_source = (ROOT / "guide_helpers" / "transformer.py").read_text()
    guide_source = python_of(jupytext.read(DOCS / "transformer.md"))
    shared, in_guide = top_level(shared_source), top_level(guide_source)
    assert {"Transformer", "DecoderBlock", "CausalSelfAttention", "next_token_loss"} <= set(shared)
    for name, dump in shared.items():
        assert in_guide.get(name) == dump, (
            f"{name} of docs/transformer.md differs from guide_helpers/transformer.py"
        )
    names = [n for n in ast.parse(shared_source).body if isinstance(n, ast.Assign)]
    assert all(ast.dump(n) in map(ast.dump, ast.parse(guide_source).body) for n in names)


def test_launch_returns_each_process_output_in_order(tmp_path, monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    script = tmp_path / "hello.py"
    script.write_text(
        textwrap.dedent("""\
            import os, sys
            i = sys.argv[sys.argv.index("--process-id") + 1]
            n = sys.argv[sys.argv.index("--num-processes") + 1]
            print(f"process {i} of {n}", os.environ["XLA_FLAGS"], sys.argv[-1])
            print("[Gloo] Rank", i, "is connected to 1 peer ranks. ")
        """)
    )
    outputs = launch(str(script), 2, 3, "extra", timeout=60, cwd=tmp_path)
    flag = "--xla_force_host_platform_device_count=3"
    assert outputs == {i: [f"process {i} of 2 {flag} extra"] for i in range(2)}


def test_launch_keeps_inherited_xla_flags_and_sets_only_the_device_count():
    inherited = "--xla_cpu_max_isa=AVX2 --xla_force_host_platform_device_count=8"
    assert xla_flags(4, inherited) == (
        "--xla_cpu_max_isa=AVX2 --xla_force_host_platform_device_count=4"
    )
    assert xla_flags(2) == "--xla_force_host_platform_device_count=2"


def test_show_prefixes_lines_in_process_order(capsys):
    show({1: ["b"], 0: ["a", "c"]})
    assert capsys.readouterr().out == "[p0] a\n[p0] c\n[p1] b\n"


def test_a_hung_child_fails_within_the_timeout(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text("import time\nprint('started', flush=True)\ntime.sleep(3600)\n")
    started = time.monotonic()
    with pytest.raises(LaunchError) as info:
        launch(str(script), 2, 1, timeout=3)
    assert time.monotonic() - started < 10
    assert info.value.returncodes == {0: -signal.SIGKILL, 1: -signal.SIGKILL}
    assert "not finished within 3 s" in str(info.value)
    assert "[p0] started" in str(info.value) and "[p1] started" in str(info.value)
    assert "ended by signal SIGKILL" in str(info.value)


def test_a_failed_child_stops_the_others_at_once(tmp_path):
    script = tmp_path / "fail_one.py"
    script.write_text(
        "import sys, time\n"
        "if '0' == sys.argv[sys.argv.index('--process-id') + 1]:\n"
        "    sys.exit('process 0 gives up')\n"
        "time.sleep(3600)\n"
    )
    started = time.monotonic()
    with pytest.raises(LaunchError) as info:
        launch(str(script), 2, 1, timeout=60)
    assert time.monotonic() - started < 10
    assert info.value.returncodes == {0: 1, 1: -signal.SIGKILL}
    assert "[p0 stderr] process 0 gives up" in str(info.value)


def test_a_signal_reaches_only_its_process_once_it_prints_the_line(tmp_path):
    script = tmp_path / "wait_for_term.py"
    script.write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(print('caught SIGTERM', flush=True)))\n"
        "for step in range(600):\n"
        "    print(f'step {step}', flush=True)\n"
        "    time.sleep(0.05)\n"
        "print('never signalled', flush=True)\n"
    )
    term = Signal(process=1, when="step 3", signal=signal.SIGTERM)
    started = time.monotonic()
    with pytest.raises(LaunchError) as info:  # process 0 is never signalled: it runs out of time
        launch(str(script), 2, 1, timeout=6, send=term)
    assert time.monotonic() - started < 15
    out = info.value.stdout
    assert out[1][-1] == "caught SIGTERM" and out[1][-2].startswith("step ")
    assert 3 <= int(out[1][-2].split()[1]) < 20  # soon after the line it waited for
    assert "caught SIGTERM" not in out[0] and info.value.returncodes == {0: -signal.SIGKILL, 1: 0}


def test_a_process_killed_by_the_signal_it_was_sent_is_a_failure(tmp_path):
    script = tmp_path / "saving.py"
    script.write_text("import time\nprint('saving', flush=True)\ntime.sleep(3600)\n")
    with pytest.raises(LaunchError) as info:
        launch(str(script), 1, 1, timeout=60, send=[Signal(0, "saving", signal.SIGKILL)])
    assert info.value.returncodes == {0: -signal.SIGKILL} and info.value.stdout[0] == ["saving"]
    assert info.value.reason == "a process failed"


def test_like_srun_sets_what_jax_reads_from_slurm_for_each_task(monkeypatch):
    """JAX's own Slurm detection, on each task's variables alone, finds the job like_srun means."""
    from jax._src import clusters

    configure = like_srun([2, 1], SLURM_RESTART_COUNT="1")
    tasks = [configure(i, 3, None) for i in range(3)]
    assert all(args == [] for args, _ in tasks)
    envs = [env for _, env in tasks]
    assert [(e["SLURM_NODEID"], e["SLURM_LOCALID"]) for e in envs] == [
        ("0", "0"),
        ("0", "1"),
        ("1", "0"),
    ]
    assert all(e["SLURM_RESTART_COUNT"] == "1" for e in envs)
    port = slurm_port(int(envs[0]["SLURM_JOB_ID"]))
    assert port_is_free(port) and envs[0]["JAX_COORDINATOR_BIND_ADDRESS"] == f"127.0.0.1:{port}"
    detect = clusters.ClusterEnv.auto_detect_unset_distributed_params
    for i, env in enumerate(envs):
        with monkeypatch.context() as m:
            for name in [n for n in os.environ if n.startswith("SLURM_")]:
                m.delenv(name)
            for name, value in env.items():
                m.setenv(name, value)
            address, n, process_id, local_ids, *_ = detect(None, None, None, None, None, 300)
        assert (address, n, process_id) == (f"127.0.0.1:{port}", 3, i)
        assert local_ids == [int(env["SLURM_LOCALID"])]
    with pytest.raises(ValueError, match="4 processes for 3 tasks"):
        configure(0, 4, None)


def test_port_is_free_sees_a_bound_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert not port_is_free(s.getsockname()[1])


def test_the_workdir_magic_writes_a_cell_and_names_only_the_file():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        workdir = make_workdir("test_workdir_")
        result = shell.run_cell("%%to_workdir job.py\nimport sys\nprint(sys.argv)\n")
        assert result.success, result.error_in_exec
        with open(f"{workdir}/job.py") as f:
            assert f.read() == "import sys\nprint(sys.argv)\n"
    finally:
        InteractiveShell.clear_instance()
    assert workdir.split("/")[-1].startswith("test_workdir_")


def test_the_workdir_magic_prints_no_path(tmp_path, capsys):
    from guide_helpers.workdir import to_workdir

    to_workdir(str(tmp_path), "a.py", "x = 1\ny = 2\n")
    assert capsys.readouterr().out == "wrote a.py, 2 lines\n"
    assert (tmp_path / "a.py").read_text() == "x = 1\ny = 2\n"


def test_gloo_messages_are_dropped_and_nothing_else():
    lines = [
        "step 0 loss 0.5",
        "[Gloo] Rank 0 is connected to 3 peer ranks. "
        "Expected number of connected peer ranks is : 3",
        "[Gloo] Rank 1 is connected to [Gloo] Rank 2 is connected to 3 peer ranks. 3",
        "3",
        "",
        "3 peer ranks. Expected number of connected peer ranks is : 3",
        "step 1 loss 0.4",
        "7",
    ]
    assert without_gloo_messages(lines) == ["step 0 loss 0.5", "step 1 loss 0.4", "7"]


def definitions(source):
    """{name: what it is} for the top-level functions and classes of a source; a class is
    known by its bases too, so an NNX twin of a linen class (other bases) is another thing."""
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = "function"
        elif isinstance(node, ast.ClassDef):
            found[node.name] = "class(" + ", ".join(map(ast.unparse, node.bases)) + ")"
    return found


def shared_definitions():
    """Every function and class that guide_helpers defines."""
    found = {}
    for module in (ROOT / "guide_helpers").glob("*.py"):
        found.update(definitions(module.read_text()))
    return found


@pytest.mark.parametrize("name", guide_names())
def test_no_guide_redefines_what_guide_helpers_provides(name):
    """One source per helper: a guide imports it. Only the main guide and the transformer guide
    write their models, their lessons (checked equal to guide_helpers above)."""
    lessons = {
        "scale_up_a_flax_model": {"DotReluDot", "MLP", "LogicalDotReluDot", "LogicalMLP"},
        "transformer": TRANSFORMER_LESSON,
    }
    allowed = lessons.get(name, set())
    shared = shared_definitions()
    in_guide = definitions(python_of(jupytext.read(DOCS / f"{name}.md")))
    copied = sorted(
        n for n, kind in in_guide.items() if shared.get(n) == kind and n not in allowed
    )
    assert not copied, f"docs/{name}.md defines {copied} again: import it from guide_helpers"


def test_the_redefinition_check_tells_a_copy_from_a_twin():
    copy = "class MLP(nn.Module):\n    pass\ndef collectives(c):\n    pass\n"
    twin = "class MLP(nnx.Module):\n    pass\n"
    shared = shared_definitions()
    assert {n for n, k in definitions(copy).items() if shared.get(n) == k} == {
        "MLP", "collectives",
    }  # fmt: skip
    assert not {n for n, k in definitions(twin).items() if shared.get(n) == k}


# A program in the forms XLA's GPU backend prints (written by hand: no GPU here): a cuBLAS gemm,
# async all-reduce and all-gather pairs, empty replica groups, a multi-operand all-reduce-start.
GPU_FORMS = """\
HloModule jit_step, is_scheduled=true, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (p0: f32[64,256], p1: f32[256,128], p2: f32[4], p3: f32[8]) -> f32[512,128] {
  %p0 = f32[64,256]{1,0} parameter(0)
  %p1 = f32[256,128]{1,0} parameter(1)
  %p2 = f32[4]{0} parameter(2)
  %p3 = f32[8]{0} parameter(3)
  %gemm = (f32[64,128]{1,0}, s8[4194304]{0}) custom-call(%p0, %p1), custom_call_target="__cublas$gemm", backend_config={"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}
  %out = f32[64,128]{1,0} get-tuple-element(%gemm), index=0
  %ars = f32[64,128]{1,0} all-reduce-start(%out), replica_groups={}, to_apply=%add
  %ard = f32[64,128]{1,0} all-reduce-done(%ars)
  %pair = (f32[4]{0}, f32[8]{0}) all-reduce-start(%p2, %p3), replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=%add
  %paird = (f32[4]{0}, f32[8]{0}) all-reduce-done(%pair)
  %ags = (f32[64,128]{1,0}, f32[512,128]{1,0}) all-gather-start(%ard), replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}
  ROOT %agd = f32[512,128]{1,0} all-gather-done(%ags)
}
"""  # noqa: E501


def test_readers_handle_the_gpu_backends_forms():
    rows = gc.collectives(GPU_FORMS)
    assert [(c.kind, c.shape, c.group) for c in rows] == [
        ("all-reduce", "f32[64,128]", 8),  # replica_groups={}: every device of the module
        ("all-reduce", "(f32[4], f32[8])", 2),  # a start's shape is its result
        ("all-gather", "f32[512,128]", 8),  # (operand, result): the result
    ]
    assert [c.nbytes for c in rows] == [64 * 128 * 4, 12 * 4, 512 * 128 * 4]
    assert gc.matmul_flops(GPU_FORMS) == 2 * 64 * 128 * 256  # the gemm, its workspace ignored


def test_empty_replica_groups_need_the_device_count():
    with pytest.raises(ValueError, match="device count"):
        gc.group_size("replica_groups={}, to_apply=%add")
    assert gc.group_size("replica_groups={}, to_apply=%add", devices=4) == 4


def test_a_trace_is_read_per_device_and_joined_with_its_program(mesh, tmp_path):
    from guide_helpers import profile

    x = jax.device_put(jnp.ones((64, 32)), NamedSharding(mesh, P("data", "model")))
    with jax.named_scope("outer"):
        compiled = jax.jit(lambda a: jnp.sum(a @ a.T)).lower(x).compile()
    compiled(x).block_until_ready()
    with jax.profiler.trace(str(tmp_path), create_perfetto_trace=True):
        for _ in range(2):
            compiled(x).block_until_ready()
    events = profile.read_trace(tmp_path)
    assert {e.device for e in events} == set(range(8)) and len({e.run for e in events}) == 2
    labels = profile.label_instructions(compiled)
    assert {e.op for e in events} <= set(labels)
    kinds = {labels[e.op][0] for e in events}
    assert {"matmul", "all-reduce"} <= kinds
    per_device = profile.timings(events, lambda e: labels[e.op][0])
    assert all(t >= 0 for t in per_device.values()) and {d for d, _ in per_device} == set(range(8))
    with pytest.raises(FileNotFoundError, match="create_perfetto_trace=True"):
        profile.read_trace(tmp_path / "empty")


def test_scopes_come_from_jax_names():
    from guide_helpers import profile

    text = textwrap.dedent(
        """\
        HloModule m

        ENTRY %main (p: f32[4,4]) -> f32[4,4] {
          %p = f32[4,4]{1,0} parameter(0)
          %dot.1 = f32[4,4]{1,0} dot(%p, %p), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(f)/layer_1/dot_general"}
          ROOT %ar = f32[4,4]{1,0} all-reduce(%dot.1), replica_groups={{0,1}}, to_apply=%add, metadata={op_name="jit(f)/layer_10/psum"}
        }
        """  # noqa: E501
    )
    labels = profile.label_instructions(text, ["layer_1", "layer_10"])
    assert labels["dot.1"] == ("matmul", "layer_1") and labels["ar"] == ("all-reduce", "layer_10")


def test_the_memory_profile_agrees_with_the_live_arrays(mesh):
    from collections import Counter

    from guide_helpers import profile

    kept = jax.device_put(jnp.ones((16, 1024)), NamedSharding(mesh, P("data", "model")))
    samples = profile.memory_profile(jax.profiler.device_memory_profile())
    in_profile, live = Counter(), Counter()
    for s in samples:
        if s.kind == "buffer":
            in_profile[s.device] += s.nbytes
    for array in jax.live_arrays():
        for shard in array.addressable_shards:
            live[f"cpu:{shard.device.id}"] += shard.data.nbytes
    assert in_profile == live and kept.is_fully_addressable
    assert any("batched_device_put" in s.functions for s in samples if s.kind == "buffer")


# --- guide_helpers.figures: what a figure draws is what the arrays and programs hold ---


def test_blocks_are_read_from_the_sharding(mesh):
    from guide_helpers import figures

    w = jax.device_put(jnp.ones((4, 256, 1024)), NamedSharding(mesh, P(None, "data", "model")))
    assert figures.drawn_axes(w) == (1, 2)
    drawn = figures.blocks(w)
    assert len(drawn) == 8 and all(len(b.devices) == 1 for b in drawn)
    assert drawn[0] == figures.HeldBlock((0, 128), (0, 256), (0,))
    assert drawn[-1] == figures.HeldBlock((128, 256), (768, 1024), (7,))
    x = jax.device_put(jnp.ones((16, 256)), NamedSharding(mesh, P("data")))
    assert [b.devices for b in figures.blocks(x)] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    whole = jax.device_put(jnp.ones(8), NamedSharding(mesh, P()))
    assert figures.blocks(whole) == [figures.HeldBlock((0, 1), (0, 8), tuple(range(8)))]
    # A split axis other than the last two is drawn, with the last one.
    qkv = jax.device_put(jnp.ones((128, 8, 3, 16)), NamedSharding(mesh, P(None, "model")))
    assert figures.drawn_axes(qkv) == (1, 3)
    cube = jax.device_put(jnp.ones((2, 4, 2)), NamedSharding(mesh, P("data", "model")))
    assert figures.drawn_axes(cube) == (0, 1)


def test_a_figure_refuses_three_split_axes():
    from guide_helpers import figures

    mesh3 = jax.make_mesh((2, 2, 2), ("a", "b", "c"), axis_types=(AxisType.Auto,) * 3)
    cube = jax.device_put(jnp.ones((2, 2, 2)), NamedSharding(mesh3, P("a", "b", "c")))
    with pytest.raises(ValueError, match=r"two axes; this array is split along axes \[0, 1, 2\]"):
        figures.blocks(cube)


def test_device_labels_shorten_runs():
    from guide_helpers.figures import device_label

    assert device_label((0, 1, 2, 3)) == "0-3"
    assert device_label((0, 4)) == "0,4"
    assert device_label((0, 1, 3, 5, 6)) == "0-1,3,5-6"
    assert device_label(tuple(range(8)), total=8) == "all 8"


def test_figures_are_white_and_draw_every_array(mesh):
    from guide_helpers import figures

    x = jax.device_put(jnp.ones((16, 256)), NamedSharding(mesh, P("data")))
    fig = figures.layout({f"x{i}": x for i in range(5)}, columns=3)
    assert fig.get_facecolor() == (1.0, 1.0, 1.0, 1.0)  # readable on a dark page too
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(fig.axes) == 6 and len(visible) == 5
    assert [len(ax.patches) for ax in visible] == [2] * 5
    assert [t.get_text() for t in visible[0].texts] == ["0-3", "4-7"]


def test_traffic_adds_up_the_programs_collectives(mesh):
    from guide_helpers import figures

    rows = gc.collectives(scanned_step(mesh))
    by_pass = figures.traffic(rows)
    for scope, direction, kind, group in by_pass:
        chosen = [
            c for c in rows
            if (figures.scope_of(c), c.direction, c.kind, c.group)
            == (scope, direction, kind, group)
        ]  # fmt: skip
        runs = [1 if c.where == "loop" else c.per_step for c in chosen]
        assert by_pass[scope, direction, kind, group] == sum(
            r * c.nbytes for r, c in zip(runs, chosen)
        )
    fig = figures.traffic_chart(rows, "t")
    bars = fig.axes[0].patches
    drawn = sorted(round(b.get_width() * 1024) for b in bars)
    assert fig.get_facecolor() == (1.0, 1.0, 1.0, 1.0)
    assert drawn == sorted(by_pass.values())  # one segment per entry


# --- guide_helpers.exercises: the grader passes the reference, says what a wrong answer adds ---


def layer(x, W1, W2):
    """The main guide's one layer, its hidden activation split over 'model'."""
    return jax.lax.with_sharding_constraint(jax.nn.relu(x @ W1), P("data", "model")) @ W2


def layer_program(mesh):
    """build(answer) for answers (function, W2's spec) of one layer on the 2x4 mesh."""
    keys = jax.random.split(jax.random.key(0), 3)
    sizes = [(16, 256), (256, 1024), (1024, 256)]
    inputs = [jax.random.normal(k, s) / s[0] ** 0.5 for k, s in zip(keys, sizes)]

    def build(answer):
        function, w2_spec = answer
        specs = (P("data", None), P(None, "model"), w2_spec)
        args = jax.device_put(tuple(inputs), tuple(NamedSharding(mesh, s) for s in specs))
        out = NamedSharding(mesh, P("data", None))
        with jax.set_mesh(mesh):
            return jax.jit(function, out_shardings=out).lower(*args).compile(), args

    return build


@pytest.fixture(scope="module")
def layer_exercise():
    from guide_helpers.exercises import Exercise

    return Exercise("W2 by rows", (layer, P("model", None)), arguments=("x", "W1", "W2"))


def test_the_grader_passes_the_reference(mesh, layer_exercise):
    grade = layer_exercise.grade((layer, P("model", None)), layer_program(mesh))
    assert grade.passed and bool(grade) and grade.hints() == []
    assert str(grade).splitlines()[0] == "W2 by rows: passed"
    assert [c.name for c in grade.checks] == ["value", "shardings", "collectives", "memory"]


def test_the_grader_names_what_a_split_by_columns_adds(mesh, layer_exercise):
    grade = layer_exercise.grade((layer, P(None, "model")), layer_program(mesh))
    assert not grade.passed
    assert grade.check("value").passed  # the same numbers, laid out otherwise
    assert grade.check("shardings").hints == (
        "argument W2: P(None, 'model'), expected P('model', None)",
    )
    assert grade.check("collectives").hints == (
        "extra: 1 x all-gather f32[8,1024] forward outside loops, group of 4, per step",
        # the output's columns, joined to give it whole embed, as out_shardings asks
        "extra: 1 x all-gather f32[8,256] forward outside loops, group of 4, per step",
        "missing: 1 x all-reduce f32[8,256] forward outside loops, group of 4, per step",
    )
    assert "not yet" in str(grade) and "extra: 1 x all-gather f32[8,1024]" in str(grade)


def test_the_grader_catches_a_different_value_and_a_memory_limit(mesh, layer_exercise):
    from guide_helpers.exercises import Exercise

    def doubled(x, W1, W2):
        return 2 * layer(x, W1, W2)

    grade = layer_exercise.grade((doubled, P("model", None)), layer_program(mesh))
    assert grade.check("value").hints == ("output: differs from the reference",)
    assert grade.check("collectives").passed and grade.check("shardings").passed
    tight = Exercise("tight", (layer, P("model", None)), memory_limit=1024)
    memory_check = tight.grade((layer, P("model", None)), layer_program(mesh)).check("memory")
    assert not memory_check.passed and memory_check.hints[0].endswith("MiB over the limit")


def test_the_grader_names_a_different_mesh():
    from guide_helpers.exercises import Exercise

    def build(answer):  # answers (mesh shape, W2's spec)
        shape, w2_spec = answer
        grid = jax.make_mesh(shape, ("data", "model"), axis_types=(AxisType.Auto,) * 2)
        return layer_program(grid)((layer, w2_spec))

    exercise = Exercise("on 2x4", ((2, 4), P("model", None)))
    grade = exercise.grade(((4, 2), P("model", None)), build)
    assert grade.check("shardings").hints[0] == "mesh data=4 x model=2, expected data=2 x model=4"
    assert grade.check("collectives").hints  # groups of 2, not 4


def test_the_main_guides_fsdp_exercise_hints_at_the_gathers_it_lacks(mesh):
    """The main guide's exercise 2, graded here on the same model's gradients: its starting
    rules (data x tensor) lack FSDP's gathers, hold twice the weights, and are told so."""
    import flax.linen as nn

    from guide_helpers import exercises
    from guide_helpers.models import LogicalMLP

    model = LogicalMLP(num_layers=4, hidden=1024)
    x = jax.random.normal(jax.random.key(0), (16, 256))
    replicated = NamedSharding(mesh, P())

    def gradient_program(rules):
        with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
            boxed = jax.eval_shape(model.init, jax.random.key(1), x)
            specs = nn.get_partition_spec(boxed)
            every = nn.logical_to_mesh_sharding(specs, mesh, rules)
            params = jax.jit(model.init, out_shardings=every)(jax.random.key(1), x)
        shardings = every["params"]

        def loss(p, x):
            with nn.logical_axis_rules(rules):
                return jnp.mean(model.apply({"params": p}, x) ** 2)

        data = NamedSharding(mesh, nn.logical_to_mesh_axes(("batch", "embed"), rules))
        args = (nn.unbox(params["params"]), jax.device_put(x, data))
        grads = jax.jit(jax.value_and_grad(loss), out_shardings=(replicated, shardings))
        with jax.set_mesh(mesh):
            return grads.lower(*args).compile(), args

    data_tensor = (("batch", "data"), ("hidden", "model"), ("embed", None), ("layer", None))
    grade = exercises.FSDP_TENSOR.grade(data_tensor, gradient_program)
    assert not grade.passed and grade.check("value").passed
    assert grade.check("collectives").hints == tuple(
        f"missing: 8 x all-gather f32[256,256] {d} in the layer loop, group of 2, per step"
        for d in ("backward", "forward")
    )
    assert not grade.check("memory").passed
    assert exercises.FSDP_TENSOR.grade(exercises.FSDP_TENSOR.reference, gradient_program)


def test_the_grader_reports_an_answer_that_does_not_build(mesh, layer_exercise):
    def wrong_shapes(x, W1, W2):
        return x @ W2  # (16, 256) @ (1024, 256)

    grade = layer_exercise.grade((wrong_shapes, P("model", None)), layer_program(mesh))
    assert not grade.passed and [c.name for c in grade.checks] == ["builds"]
    assert grade.hints()[0].startswith("TypeError: dot_general requires contracting dimensions")
