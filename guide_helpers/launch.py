"""Run one script as several JAX processes on this machine, bounded in time.

`launch(script, num_processes, devices_per_process, *args)` starts `num_processes` copies of
`script`, each with `devices_per_process` emulated CPU devices and the command-line arguments
that `jax.distributed.initialize` needs, waits for all of them within `timeout` seconds, and
returns {process id: stdout lines}. It never leaves a process behind: when one fails, or the time
is up, it kills the others and raises `LaunchError` with every process's exit status and output.
Processes print without colour (`child.environ`), so `child.raised` reads their errors.
`send=Signal(process, when, signal)` injects a fault: the signal goes to that process once a line
of its stdout starts with `when` (a preemption's SIGTERM, a SIGKILL mid-save).
`configure=like_srun(tasks_per_node)` starts them as `srun` would, with Slurm's variables.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

from guide_helpers.child import environ


def _free_port():
    """A TCP port on 127.0.0.1 that nothing listens on at the moment."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _with_arguments(i, num_processes, port):
    """Process i's extra arguments and environment: here, everything on the command line.

    The coordinator listens on every interface unless told otherwise; the port was found free
    on 127.0.0.1 only, so JAX_COORDINATOR_BIND_ADDRESS binds it there.
    """
    coordinator = f"127.0.0.1:{port}"
    args = ["--coordinator", coordinator, "--num-processes", str(num_processes)]
    return args + ["--process-id", str(i)], {"JAX_COORDINATOR_BIND_ADDRESS": coordinator}


def slurm_port(job_id):
    """The coordinator's port that JAX derives from a Slurm job id when JAX_COORDINATOR_PORT is
    unset (`jax/_src/clusters/slurm_cluster.py`)."""
    return job_id % 4096 + 61440


def port_is_free(port):
    """Whether a TCP port on 127.0.0.1 can be bound at the moment."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def like_srun(tasks_per_node, **extra):
    """A `configure` for `launch`: no arguments, and each task's variables as `srun` sets them.

    Node n holds tasks_per_node[n] tasks, numbered node by node, every node at 127.0.0.1; `extra`
    adds variables to every task (SLURM_RESTART_COUNT, JAX_LOCAL_DEVICE_IDS). The job id is
    one whose coordinator port, derived as JAX does, is free now; process 0's coordinator binds
    there on 127.0.0.1 (launch's own port is not used).
    """
    job = next(j for j in range(10_000, 14_096) if port_is_free(slurm_port(j)))
    node_of = [n for n, count in enumerate(tasks_per_node) for _ in range(count)]

    def configure(i, num_processes, _port):
        if num_processes != len(node_of):
            raise ValueError(
                f"{num_processes} processes for {len(node_of)} tasks {tasks_per_node}"
            )
        return [], {
            "SLURM_JOB_ID": str(job),
            "SLURM_STEP_NODELIST": ",".join(["127.0.0.1"] * len(tasks_per_node)),
            "SLURM_NTASKS": str(num_processes),
            "SLURM_PROCID": str(i),
            "SLURM_LOCALID": str(node_of[:i].count(node_of[i])),  # its rank on its node
            "SLURM_NODEID": str(node_of[i]),
            "JAX_COORDINATOR_BIND_ADDRESS": f"127.0.0.1:{slurm_port(job)}",
            **extra,
        }

    return configure


def xla_flags(devices_per_process, inherited=""):
    """XLA_FLAGS for a child: the inherited flags (an ISA cap, say), with its device count."""
    kept = [f for f in inherited.split() if not f.startswith("--xla_force_host_platform_device")]
    return " ".join([*kept, f"--xla_force_host_platform_device_count={devices_per_process}"])


class Signal(NamedTuple):
    """Send `signal` to process `process` once a line of its stdout starts with `when`."""

    process: int
    when: str
    signal: int


def exit_status(code):
    return f"ended by signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


class LaunchError(RuntimeError):
    """A launch that failed or ran out of time, with each process's exit status and output."""

    def __init__(self, reason, returncodes, stdout, stderr):
        report = [reason]
        for i, code in returncodes.items():
            report.append(f"process {i}: {exit_status(code)}")
            report += [f"[p{i}] {line}" for line in stdout[i]]
            report += [f"[p{i} stderr] {line}" for line in stderr[i]]
        super().__init__("\n".join(report))
        self.reason = reason
        self.returncodes = returncodes  # {process id: exit code, negative for a signal}
        self.stdout = stdout  # {process id: lines}
        self.stderr = stderr


# On CPU devices gloo carries the collectives and prints, from several threads at once,
# "[Gloo] Rank 0 is connected to 3 peer ranks. Expected number of connected peer ranks is : 3",
# in pieces that can share a line with each other. These are its words.
GLOO_WORDS = (
    r"\[Gloo\] Rank|is connected to|peer ranks\.|Expected number of connected peer ranks is :"
)
GLOO_PIECES = re.compile(rf"(?:{GLOO_WORDS}|\d+|\s+)*")


def without_gloo_messages(lines):
    """The lines, less gloo's: lines made only of its pieces and holding some of its words,
    and blank or bare-number lines right after such a line. Every other line stays."""
    kept, after_gloo = [], False
    for line in lines:
        only_pieces = GLOO_PIECES.fullmatch(line) is not None
        is_gloo = only_pieces and (re.search(GLOO_WORDS, line) is not None or after_gloo)
        if not is_gloo:
            kept.append(line)
        after_gloo = is_gloo
    return kept


def launch(
    script,
    num_processes,
    devices_per_process,
    *args,
    timeout=120,
    start=None,
    configure=_with_arguments,
    cwd=None,
    send=(),
):
    """Run `script` as `num_processes` JAX processes; return {process id: stdout lines}.

    `start` starts only some of the processes; `configure(i, num_processes, port)` returns
    process i's extra arguments and environment; `cwd` is the processes' working directory, where
    a relative `script` is found; `send` is a Signal or a sequence of them, each sent once.
    Each process writes to a file, not a pipe, so none blocks on a full pipe. Raises LaunchError,
    with no process left running, if a process fails (a signal it was sent counts as a failure
    unless it exits 0) or they are not all done within `timeout` seconds.
    """
    pending = [send] if isinstance(send, Signal) else list(send)
    port = _free_port()
    processes, reason = {}, None
    with tempfile.TemporaryDirectory(prefix="launch_") as logs:
        try:
            for i in range(num_processes) if start is None else start:
                extra_args, extra_env = configure(i, num_processes, port)
                env = environ({
                    "XLA_FLAGS": xla_flags(devices_per_process, os.environ.get("XLA_FLAGS", "")),
                    "JAX_PLATFORMS": "cpu",
                    **extra_env,
                })  # fmt: skip
                with open(f"{logs}/{i}.out", "w") as out, open(f"{logs}/{i}.err", "w") as err:
                    command = [sys.executable, script, *extra_args, *args]
                    processes[i] = subprocess.Popen(
                        command, stdout=out, stderr=err, env=env, cwd=cwd
                    )
            deadline = time.monotonic() + timeout
            while reason is None and not all(p.poll() == 0 for p in processes.values()):
                if any(p.poll() not in (None, 0) for p in processes.values()):
                    others = any(p.poll() is None for p in processes.values())
                    reason = "a process failed" + ("; the launcher stopped the rest" * others)
                elif time.monotonic() > deadline:
                    reason = f"not finished within {timeout} s; the launcher stopped every process"
                else:
                    pending = [s for s in pending if not sent(s, processes, logs)]
                    time.sleep(0.02 if pending else 0.1)
        finally:  # success, failure, timeout or an interrupted cell: stop and reap every one
            for p in processes.values():
                if p.poll() is None:
                    p.kill()
                p.wait()

        def read(i, stream):
            with open(f"{logs}/{i}.{stream}") as f:
                return f.read().splitlines()

        stdout = {i: without_gloo_messages(read(i, "out")) for i in processes}
        if reason is not None:
            stderr = {i: read(i, "err") for i in processes}
            returncodes = {i: p.returncode for i, p in processes.items()}
            raise LaunchError(reason, returncodes, stdout, stderr)
    return stdout


def sent(signal_to_send, processes, logs):
    """Send the signal if its process, still running, has printed its line; True once sent."""
    process = processes.get(signal_to_send.process)
    if process is None or process.poll() is not None:
        return False
    with open(f"{logs}/{signal_to_send.process}.out") as f:
        if not any(line.startswith(signal_to_send.when) for line in f):
            return False
    process.send_signal(signal_to_send.signal)
    return True


def show(outputs):
    """Print each process's lines, prefixed by its id, in process order."""
    for i in sorted(outputs):
        for line in outputs[i]:
            print(f"[p{i}] {line}")
