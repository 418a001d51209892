"""Every test is hermetic: the process (and every process a test starts) has a temporary HOME, cache
and config folder, and a fixed kernel plan that no timing chooses.

Set at import, before any library reads them: ``HOME``, ``XDG_CACHE_HOME``, ``XDG_CONFIG_HOME``,
``MPLCONFIGDIR`` and ``VISION_ATTN_CACHE`` point into one temporary folder per test process (the demo
data sets are written there once per process, not into the user's cache), and
``VISION_ATTN_KERNELS=onednn`` fixes the kernel plan (oneDNN at every size, where it runs: the fast
paths are what every model test exercises). Tests of the self-checks say so and build their own
plans and caches.
"""
import atexit
import os
import shutil
import tempfile

_HOME = tempfile.mkdtemp(prefix="vision_attn-tests-home-")
atexit.register(shutil.rmtree, _HOME, True)
os.environ.update({
    "HOME": _HOME,
    "XDG_CACHE_HOME": os.path.join(_HOME, ".cache"),
    "XDG_CONFIG_HOME": os.path.join(_HOME, ".config"),
    "MPLCONFIGDIR": os.path.join(_HOME, ".config", "matplotlib"),
    "VISION_ATTN_CACHE": os.path.join(_HOME, ".cache", "vision_attn"),
    "VISION_ATTN_KERNELS": "onednn",
    "NO_ALBUMENTATIONS_UPDATE": "1",
    # transformers (a test-only peer): offline, and no kernels fetched from the hub at from_pretrained
    "HF_HUB_OFFLINE": "1",
    "USE_HUB_KERNELS": "0",
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
})

from tests.peers import quiet_ultralytics_environment  # noqa: E402

quiet_ultralytics_environment()  # any test that imports ultralytics: offline, settings in a temporary folder

import pytest  # noqa: E402
import torch  # noqa: E402

from vision_attn.kernels import set_kernel_plan  # noqa: E402

TEST_PLAN = "onednn"

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)  # one thread per worker: the workers share the machine's cores


@pytest.fixture(autouse=True)
def _seed_and_plan():
    torch.manual_seed(0)
    set_kernel_plan(TEST_PLAN)  # whatever an earlier test of this process set
    yield
