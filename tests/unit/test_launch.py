"""guide_helpers.launch: real child processes, their output, timeouts, signals and Slurm's
environment.
"""

import os
import signal
import socket
import textwrap
import time

import pytest

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
        launch(str(script), 2, 1, timeout=2)
    assert time.monotonic() - started < 10
    assert info.value.returncodes == {0: -signal.SIGKILL, 1: -signal.SIGKILL}
    assert "not finished within 2 s" in str(info.value)
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
        launch(str(script), 2, 1, timeout=2, send=term)
    assert time.monotonic() - started < 12
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
