from pathlib import Path

import pytest

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "models"


@pytest.fixture
def configs() -> Path:
    return CONFIGS
