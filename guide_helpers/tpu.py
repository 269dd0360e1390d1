"""The TPU compiler on a machine with no TPU: the chips of a TPU slice, to compile for.

`topology("v5e:2x4")` returns the 8 chips of a v5e slice as JAX devices that can compile but
not run. `jax.make_mesh(..., devices=chips)` lays a mesh over them, and
`jax.jit(f).lower(*abstract_args).compile()`, with arguments given as `jax.ShapeDtypeStruct`s
sharded over that mesh, gives the program XLA's TPU compiler makes for the slice.

The compiler is `libtpu`, about 680 MB installed. `make setup` installs it with `pip --target`
into LIBTPU_DIR, a folder off Python's import path, so that only code that asks for it loads it:
a libtpu that JAX can import is loaded whenever JAX starts its backends, and on a machine without
TPUs it then prints warnings on stderr in every guide. On a TPU VM the installed `libtpu` serves.
"""

import os
import subprocess
import sys
from pathlib import Path

import jax
from jax.experimental import topologies

# The pin, read from the one file that states it (shipped with the package, for Colab)
PINS = Path(__file__).parent / "requirements-tpu.txt"
LIBTPU = next(line for line in PINS.read_text().splitlines() if line and line[0] != "#")
LIBTPU_DIR = Path(sys.prefix) / "libtpu"
INSTALL = f'pip install --target "{LIBTPU_DIR}" "{LIBTPU}"'
# What libtpu reads about its host; on a machine without TPUs it otherwise asks a metadata server
# and prints warnings on stderr. And a TPU's libtpu takes /tmp/libtpu_lockfile, so that one
# process at a time drives the chips: a second process that loads it fails ("Internal error when
# accessing libtpu multi-process lockfile"); compiling only, any number may. Set only when the
# library is LIBTPU_DIR's.
NO_TPU_HOST = {
    "TPU_SKIP_MDS_QUERY": "1",
    "TPU_ACCELERATOR_TYPE": "v5p-8",
    "TPU_WORKER_HOSTNAMES": "localhost",
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
}


class TPUCompilerMissing(RuntimeError):
    pass


def install_in_colab():
    """In Colab only, install the TPU compiler into LIBTPU_DIR if no libtpu is found (locally,
    `make setup` installed it; elsewhere nothing is downloaded)."""
    if "google.colab" in sys.modules and library_path() is None:
        pip = [sys.executable, "-m", "pip", "install", "-q", "--target", str(LIBTPU_DIR), LIBTPU]
        subprocess.run(pip, check=True)


def library_path():
    """libtpu.so: the importable `libtpu` package's (a TPU VM), else LIBTPU_DIR's; else None."""
    try:
        import libtpu
    except ImportError:
        pass
    else:
        return Path(libtpu.get_library_path())
    path = LIBTPU_DIR / "libtpu" / "libtpu.so"
    return path if path.is_file() else None


def topology(name):
    """The chips of the TPU slice `name` ("v5e:2x4", "v5p:2x2x2", ...), to compile for."""
    jax.devices()  # JAX's own backends start first, without the TPU library
    path = library_path()
    if path is None:
        raise TPUCompilerMissing(
            f"The TPU compiler (libtpu) is not installed: found neither an importable libtpu "
            f"nor {LIBTPU_DIR / 'libtpu' / 'libtpu.so'}. `make setup` installs it; by hand: "
            f"{INSTALL}"
        )
    if path.is_relative_to(LIBTPU_DIR):
        for key, value in NO_TPU_HOST.items():
            os.environ.setdefault(key, value)
        os.environ["TPU_LIBRARY_PATH"] = str(path)
    return topologies.get_topology_desc(platform="tpu", topology_name=name).devices
