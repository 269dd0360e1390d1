"""Write what every guide shares, from one source each (run by `make sync`).

- The "Open in Colab" link: the first line starting with `[Open in Colab](` in docs/NAME.md; it
  must open notebooks/NAME.ipynb of the repository that conf.py's REPOSITORY_URL names.
- The Colab install cell, the guide's first code cell: `install_cell()`, with the pins of
  requirements.txt and this repository's helper package, `"guide-helpers @ git+URL@BRANCH"`.
- The device setup cell, the second: `setup_cell(name)`, 8 devices (or the count `DEVICES` gives
  the guide) or a message that says what to do.

A fork changes REPOSITORY_URL once and runs `make sync`; a new pin, the same.
tests/site/test_site.py checks that every guide agrees.
"""

import re
import runpy
import sys
from pathlib import Path

from guides import guide_names

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"^\[Open in Colab\]\([^)]*\)", re.M)
# The first code cell, tagged hide-input, whose code starts with the "# Colab only" comment.
INSTALL = re.compile(
    r"(```\{code-cell\} ipython3\n:tags: \[hide-input\]\n\n)# Colab only:.*?\n```", re.S
)
COMMENT = (
    "# Colab only: install the pinned stack and this site's helpers (locally, `make html` did)."
)
SETUP_CELL = """\
import jax

from guide_helpers import require_devices

with require_devices(8):  # too few devices: stop and say what to do
    jax.config.update("jax_num_cpu_devices", 8)  # on CPU: 8 emulated devices"""
# Guides that need another count than 8, or CPU devices on any host: the 8B plan's two nodes of 8,
# the TPU compiler page's CPU programs (both compile for them) and the v5e ground truth page,
# which compiles for a TPU chip that is not there, and the host offload page, whose CPU steps
# show that nothing moves there, so that a host with GPUs or TPUs runs them unchanged.
DEVICES = {
    "plan_an_8b_model": (16, "cpu"),
    "tpu_compiler": (8, "cpu"),
    "ground_truth_v5e": (8, "cpu"),
    "host_offload": (8, "cpu"),
}


def setup_cell(name):
    """The device setup cell of the guide `name`: SETUP_CELL with its device count."""
    if name not in DEVICES:
        return SETUP_CELL
    devices, platform = DEVICES[name]
    return SETUP_CELL.replace("(8)", f'({devices}, platform="{platform}")').replace(
        ", 8)  # on CPU: 8 emulated", f", {devices})  # on CPU: {devices} emulated"
    )


# The code cell that sets jax_num_cpu_devices: the body of its code-cell fence.
SETUP = re.compile(
    r"(```\{code-cell\} ipython3\n)(import jax\n[^`]*?jax_num_cpu_devices[^`]*?)\n```"
)
# What Colab lacks; it has numpy and matplotlib already.
COLAB_PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "grain")


def pins():
    """{package: version} for every `package==version` line of requirements.txt."""
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return dict(line.split("#")[0].strip().split("==") for line in lines if "==" in line)


# JAX's build for the runtime's accelerator, told by a PCI vendor id as JAX itself finds TPUs:
# NVIDIA's GPUs take the CUDA 12 build, Google's TPUs the TPU build, anything else the CPU one.
ACCELERATOR_EXTRAS = {"0x1ae0": "[tpu]", "0x10de": "[cuda12]"}
PCI_VENDORS = "/sys/bus/pci/devices/*/vendor"


def install_cell(conf=None):
    """The code of every guide's first cell: in Colab only, install what the guides need.

    JAX goes in with the extra that matches the runtime, so that a GPU or TPU runtime keeps an
    accelerator build of the pinned version instead of getting the CPU one."""
    conf = conf or runpy.run_path(str(ROOT / "conf.py"))
    versions = pins()
    lines = [[]]  # the pins after jax's, in as few lines as fit in 99 characters
    for pin in (f'"{p}=={versions[p]}"' for p in COLAB_PACKAGES[1:]):
        if len(", ".join(lines[-1] + [pin])) > 99 - len("        + []"):
            lines.append([])
        lines[-1].append(pin)
    stack = [f"        + [{', '.join(line)}]" for line in lines]
    extras = ", ".join(f'"{vendor}": "{extra}"' for vendor, extra in ACCELERATOR_EXTRAS.items())
    return "\n".join([
        COMMENT,
        "import glob",
        "import subprocess",
        "import sys",
        "from pathlib import Path",
        "",
        'if "google.colab" in sys.modules:',
        "    # JAX built for this runtime's accelerator, found by PCI vendor (TPU, NVIDIA GPU).",
        f'    vendors = {{Path(f).read_text().strip() for f in glob.glob("{PCI_VENDORS}")}}',
        f"    extras = {{{extras}}}",
        '    extra = next((extras[v] for v in extras if v in vendors), "")',
        "    subprocess.run(",
        '        [sys.executable, "-m", "pip", "install", "-q"]',
        f'        + [f"jax{{extra}}=={versions["jax"]}"]',
        *stack,
        f'        + ["{conf["helpers_requirement"]()}"],',
        "        check=True,",
        "    )",
    ])  # fmt: skip


def main():
    conf = runpy.run_path(str(ROOT / "conf.py"))
    cell = install_cell(conf)
    status = 0
    for name in guide_names(ROOT / "docs"):
        md = ROOT / "docs" / f"{name}.md"
        text = md.read_text()
        if not (LINK.search(text) and INSTALL.search(text) and SETUP.search(text)):
            print(
                f"error: {md.relative_to(ROOT)} needs an '[Open in Colab](...)' line after its "
                "title, then the Colab install cell (tagged hide-input, starting '# Colab "
                "only:') and the device setup cell; copy them from another guide"
            )
            status = 1
            continue
        new = LINK.sub(lambda _: f"[Open in Colab]({conf['colab_url'](name)})", text, count=1)
        new = INSTALL.sub(lambda m: m[1] + cell + "\n```", new, count=1)
        new = SETUP.sub(lambda m: m[1] + setup_cell(name) + "\n```", new, count=1)
        if new != text:
            md.write_text(new)
            print(f"updated the shared cells of {md.relative_to(ROOT)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
