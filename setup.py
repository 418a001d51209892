"""The package's one non-declarative piece: the repository's top-level ``configs/`` (model YAMLs and
training configs, the one copy) is shipped inside the package as ``vision_attn/configs/``, so a wheel
finds by name what a source checkout finds beside the package (see vision_attn/io/resources.py)."""
from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["vision_attn*"]) + ["vision_attn.configs"],
    package_dir={"vision_attn.configs": "configs"},
    package_data={"vision_attn.configs": ["models/*.yaml", "train/*/*.yaml"]},
)
