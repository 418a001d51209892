import os

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

from tests.peers import quiet_ultralytics_environment  # noqa: E402

quiet_ultralytics_environment()  # any test that imports ultralytics: offline, settings in a temporary folder

import pytest  # noqa: E402
import torch  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)  # one thread per worker: the workers share the machine's cores


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
