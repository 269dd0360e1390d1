"""The device check of every guide's setup cell."""

import contextlib

import jax

RESTART = (
    "JAX had already started its CPU backend before this cell asked for emulated devices, so "
    "the setting cannot take effect. Restart the kernel (in Colab: Runtime > Restart session) "
    "and run this cell before any other cell uses jax."
)


def _fix(devices, needed):
    platform = devices[0].platform
    if platform == "cpu":
        return RESTART
    return (
        f"This runtime has {len(devices)} {platform.upper()} device(s). Use a runtime with "
        f"{needed} accelerators (a TPU v2-8 in Colab, say), or a CPU runtime, where this cell "
        "emulates them; on a GPU machine, set JAX_PLATFORMS=cpu before importing jax."
    )


@contextlib.contextmanager
def require_devices(needed, platform=None):
    """Run the device setting inside; afterwards, stop with what to do if there are too few.

    `platform="cpu"` counts JAX's CPU devices, for a guide that compiles for them on any host
    (a GPU host's default devices are its GPUs, however many CPU devices are emulated).

    `jax.config.update("jax_num_cpu_devices", n)` raises once JAX has started its backends
    with another count; that error, too, becomes the message that says how to recover.
    """
    try:
        yield
    except RuntimeError as error:
        if "before backends are initialized" not in str(error):
            raise
        found = len(jax.devices(platform))
        message = f"This guide needs {needed} devices, found {found}. {RESTART}"
        raise RuntimeError(message) from error
    devices = jax.devices(platform)
    if len(devices) < needed:
        message = f"This guide needs {needed} devices, found {len(devices)}. "
        raise RuntimeError(message + _fix(devices, needed))
    print(f"{len(devices)} devices, platform {devices[0].platform}")
