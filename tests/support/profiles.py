"""Two profiles: this machine as it is, and a second that differs from it in every way a
stored output could depend on (tests/site/test_portability.py executes the guides under it).

The second profile runs another Python, Colab's (a venv of its own, made by the Makefile and
named by PORTABILITY_PYTHON), caps XLA's vector ISA one step below this CPU's
(`--xla_cpu_max_isa`), makes NumPy's OpenBLAS take another kernel (`OPENBLAS_CORETYPE`), and pins
the run to one core (`taskset`), all at once. `probe(profile)` reports what a process under a
profile really gets, so a test can check that each difference took effect instead of assuming it.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

# (XLA's name for the cap, a CPU flag the CPU must have for a lower cap to differ)
ISA_CAPS = (("AVX2", "avx512f"), ("AVX", "avx2"), ("SSE4_2", "avx"))
# OpenBLAS kernels to switch to, each with the CPU flag it needs to run at all.
BLAS_KERNELS = (("Haswell", "avx2"), ("Sandybridge", "avx"), ("Nehalem", "sse4_2"))
# Instructions that only a cap can forbid: AVX-512's mask and upper registers and broadcasts;
# FMA3, which a cap at AVX (or lower) forbids.
AVX512_ONLY = re.compile(r"%zmm|%k[1-7]|%ymm(1[6-9]|2[0-9]|3[01])|\{1to\d+\}")
FMA = re.compile(r"\bvfn?m(add|sub)")

PROBE = r"""
import json, os, sys, threadpoolctl
import jax, jax.numpy as jnp

def loss(w, x):
    return jnp.mean(jnp.tanh(jax.nn.relu(x @ w) @ w.T) ** 2)

jax.jit(jax.grad(loss))(jnp.ones((256, 512)), jnp.ones((64, 256))).block_until_ready()
blas = [i for i in threadpoolctl.threadpool_info() if i["internal_api"] == "openblas"]
json.dump({
    "python": "%d.%d" % sys.version_info[:2],
    "blas_kernel": blas[0]["architecture"] if blas else None,
    "cpus": len(os.sched_getaffinity(0)),
}, sys.stdout)
"""


@dataclass
class Profile:
    name: str
    env: dict = field(default_factory=dict)  # set on top of this process's environment
    prefix: list = field(default_factory=list)  # the command runs under it (taskset)
    python: str = sys.executable  # a command's Python (sys.executable in it is replaced)
    changes: dict = field(default_factory=dict)  # {what: value}, for reports

    def environ(self):
        return {**os.environ, **self.env}

    def command(self, cmd):
        return [*self.prefix, *(self.python if part == sys.executable else part for part in cmd)]


def cpu_flags():
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    match = re.search(r"^flags\s*:(.*)$", text, re.M)
    return set(match[1].split()) if match else set()


def default_profile():
    return Profile("this machine")


def second_python():
    """Colab's Python in its venv (`make setup-colab`), named by PORTABILITY_PYTHON."""
    python = os.environ.get("PORTABILITY_PYTHON", "")
    if not Path(python).is_file():
        raise RuntimeError(
            f"PORTABILITY_PYTHON={python!r} is no Python: run the tests with `make test` or "
            "`make portability`, which make the second profile's venv (.venv-colab) first"
        )
    return python


def second_profile(default_probe, cpu=None):
    """The second profile, chosen against what this machine's default profile gets, on core
    `cpu` (the first this process may use, by default)."""
    flags = cpu_flags()
    python = second_python()
    isa = next((cap for cap, needs in ISA_CAPS if needs in flags), None)
    blas = next(
        (k for k, needs in BLAS_KERNELS if needs in flags and k != default_probe["blas_kernel"]),
        None,
    )
    if isa is None or blas is None or not shutil.which("taskset"):
        raise RuntimeError(
            f"cannot make a second CPU profile here: ISA cap {isa}, BLAS kernel {blas}, "
            f"taskset {shutil.which('taskset')} (CPU flags: {len(flags)})"
        )
    cpu = min(os.sched_getaffinity(0)) if cpu is None else cpu
    flags_before = os.environ.get("XLA_FLAGS", "")
    return Profile(
        "second CPU profile",
        env={
            "XLA_FLAGS": f"{flags_before} --xla_cpu_max_isa={isa}".strip(),
            "OPENBLAS_CORETYPE": blas,
        },
        prefix=["taskset", "-c", str(cpu)],
        python=python,
        changes={
            "Python": python,
            "XLA's ISA": f"at most {isa}",
            "OpenBLAS kernel": blas,
            "cores": 1,
        },
    )


def count(pattern, disassembly):
    return len(pattern.findall(disassembly))


def probe(profile, timeout=300):
    """What a Python process under `profile` gets: its OpenBLAS kernel, its cores, and how many
    AVX-512-only and FMA instructions XLA put in the program it compiled (read with objdump)."""
    if not shutil.which("objdump"):
        raise RuntimeError("objdump (binutils) is needed to read XLA's machine code")
    with tempfile.TemporaryDirectory(prefix="profile_") as dump:
        env = profile.environ()
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_dump_to={dump}".strip()
        env["JAX_PLATFORMS"] = "cpu"
        result = subprocess.run(
            profile.command([sys.executable, "-c", PROBE]),
            capture_output=True, text=True, timeout=timeout, env=env,
        )  # fmt: skip
        if result.returncode != 0 or "Unknown CPU ISA" in result.stderr:
            raise RuntimeError(f"the probe failed under {profile.name}:\n{result.stderr}")
        report = json.loads(result.stdout)
        code = "".join(
            subprocess.run(["objdump", "-d", str(o)], capture_output=True, text=True).stdout
            for o in sorted(Path(dump).glob("*.o"))
        )
    report["avx512_only_instructions"] = count(AVX512_ONLY, code)
    report["fma_instructions"] = count(FMA, code)
    report["instructions"] = code.count("\n")
    return report


def not_taken_effect(default, second, profile):
    """What the second profile was meant to change but did not, as sentences ([] if all did)."""
    missing = []
    if second["python"] == default["python"]:
        missing.append(f"Python: {second['python']} in both ({profile.python})")
    isa = profile.env["XLA_FLAGS"].rsplit("--xla_cpu_max_isa=", 1)[1]
    kind = "avx512_only_instructions" if isa == "AVX2" else "fma_instructions"
    if not default[kind] or second[kind]:
        missing.append(
            f"XLA's ISA cap {isa}: {kind} {default[kind]} by default, {second[kind]} capped"
        )
    if second["blas_kernel"] != profile.env["OPENBLAS_CORETYPE"] or (
        second["blas_kernel"] == default["blas_kernel"]
    ):
        missing.append(
            f"OpenBLAS kernel: asked for {profile.env['OPENBLAS_CORETYPE']}, got "
            f"{second['blas_kernel']} (default {default['blas_kernel']})"
        )
    if second["cpus"] != 1 or default["cpus"] == 1:
        missing.append(f"cores: {second['cpus']} under taskset, {default['cpus']} by default")
    return missing
