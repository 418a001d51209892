"""Untrusted YAML, JSON and label files are refused by their bounds, before anything is expanded."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tools.suites.untrusted_inputs import DETECTOR, alias_bomb
from vision_attn.errors import ConfigError, DataError
from vision_attn.io.json import read_json
from vision_attn.io.text import read_lines
from vision_attn.io.yaml import CONFIG_LIMITS, DETECTOR_LIMITS, YamlLimits, check_yaml, load_yaml, read_yaml, read_yaml_text

ROOT = Path(__file__).resolve().parents[2]


def test_alias_bomb_is_refused_before_it_expands():
    with pytest.raises(ConfigError, match=r"bomb.yaml: line 6, column \d+: the document expands to more than 1,000,000 nodes"):
        load_yaml(alias_bomb(), "bomb.yaml")


def test_aliases_within_the_bounds_load_in_configs_and_are_refused_in_detector_yamls():
    text = "base: &b {lr: 0.1, epochs: 3}\nrun: *b\n"
    assert load_yaml(text, "cfg.yaml") == {"base": {"lr": 0.1, "epochs": 3}, "run": {"lr": 0.1, "epochs": 3}}
    with pytest.raises(ConfigError, match=r"det.yaml: line 1, column \d+: anchor &b: anchors and aliases are not allowed"):
        load_yaml(text, "det.yaml", DETECTOR_LIMITS)
    with pytest.raises(ConfigError, match=r"line 2, column \d+: alias \*b"):
        check_yaml("a: 1\nb: *b\n", "det.yaml", DETECTOR_LIMITS)


def test_node_count_expands_aliases_exactly():
    # 1 mapping + 2 keys + list(1) + 3 scalars + alias of the list (4 nodes) = 11
    text = "a: &l [1, 2, 3]\nb: *l\n"
    check_yaml(text, "x", YamlLimits(max_nodes=11))
    with pytest.raises(ConfigError, match="more than 10 nodes"):
        check_yaml(text, "x", YamlLimits(max_nodes=10))


@pytest.mark.parametrize("depth,ok", [(64, True), (65, False), (10_000, False)])
def test_nesting_depth(depth, ok):
    text = "[" * depth + "]" * depth
    if ok:
        assert check_yaml(text, "deep.yaml") is None
    else:
        with pytest.raises(ConfigError, match=r"deep.yaml: line 1, column \d+: nesting deeper than the limit of 64 levels"):
            load_yaml(text, "deep.yaml")


def test_long_scalar_and_unsafe_tags():
    with pytest.raises(ConfigError, match=r"line 2, column \d+: a scalar of 65,537 characters is over the limit of 65,536"):
        load_yaml("a: 1\nb: " + "x" * 65_537 + "\n", "long.yaml")
    with pytest.raises(ConfigError, match=r"evil.yaml: line 1, column \d+: not a safe YAML document"):
        load_yaml("a: !!python/object/apply:os.system ['true']\n", "evil.yaml")
    with pytest.raises(ConfigError, match=r"broken.yaml: line 2, column \d+: not valid YAML"):
        load_yaml("a: [1\nb: 2\n", "broken.yaml")


def test_file_size_is_checked_before_reading(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("a: 1\n# " + "x" * 2_000 + "\n")
    with pytest.raises(ConfigError, match=r"big.yaml: 2,008 bytes is over the limit of 1,000 bytes for a training config"):
        read_yaml_text(big, YamlLimits(max_bytes=1_000), what="training config")
    assert read_yaml(big) == {"a": 1}


def _shipped_yamls():
    return sorted((ROOT / "configs").rglob("*.yaml"))


@pytest.mark.parametrize("path", _shipped_yamls(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_config_loads(path):
    data = read_yaml(path)
    assert isinstance(data, dict)
    if "backbone" in data:  # a model YAML: the detector bounds (no aliases)
        assert read_yaml(path, DETECTOR_LIMITS) == data
    assert data == yaml.safe_load(path.read_text())


def _ultralytics_yamls():
    spec = importlib.util.find_spec("ultralytics")  # the test-only peer's files, read and never imported
    assert spec is not None and spec.submodule_search_locations, "ultralytics (test-only peer) is not installed"
    return sorted((Path(spec.submodule_search_locations[0]) / "cfg" / "models").rglob("*.yaml"))


def test_every_ultralytics_model_yaml_loads_within_the_detector_bounds():
    files = _ultralytics_yamls()
    assert len(files) > 50
    for path in files:
        assert read_yaml(path, DETECTOR_LIMITS) == yaml.safe_load(path.read_text()), path


def test_json_depth_size_and_syntax(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 10_000 + "]" * 10_000)
    with pytest.raises(DataError, match=r"annotations file .*deep.json: nested deeper than the JSON reader's limit"):
        read_json(deep, what="annotations file")
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({"images": [], "annotations": [{"bbox": [1, 2, 3, 4]}]}))
    assert read_json(ok)["annotations"][0]["bbox"] == [1, 2, 3, 4]
    with pytest.raises(DataError, match=r"ok.json: .* bytes is over the limit of 10 bytes"):
        read_json(ok, max_bytes=10)
    (tmp_path / "bad.json").write_text('{"a": ')
    with pytest.raises(DataError, match=r"bad.json: not valid JSON: malformed JSON at line 1, column 7"):
        read_json(tmp_path / "bad.json")


def test_label_line_longer_than_the_bound_names_file_and_line(tmp_path):
    labels = tmp_path / "img.txt"
    labels.write_text("0 0.5 0.5 0.1 0.1\n" + "0 " + "0.5 " * 40_000 + "\n")
    reader = read_lines(labels, what="label file")
    assert next(reader) == (1, "0 0.5 0.5 0.1 0.1")
    with pytest.raises(DataError, match=r"label file .*img.txt, line 2: longer than the limit of 131,072 characters"):
        next(reader)


def test_yaml_insert_refuses_an_input_or_output_that_does_not_build(tmp_path, capsys):
    from vision_attn.cli import main

    broken = tmp_path / "broken.yaml"
    broken.write_text(DETECTOR.replace("[[2, 4], 1, Detect, [nc]] # 5", "[[0, 4], 1, Concat, [1]] # 5\n"
                                       "  - [[2, 4], 1, Detect, [nc]] # 6"))
    out = tmp_path / "out.yaml"
    assert main(["yaml", "insert", str(broken), "--block", "CBAM", "--after", "C2f", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "broken.yaml: the input YAML does not build at scale n" in err and err.count("\n") == 1
    good = tmp_path / "good.yaml"
    good.write_text(DETECTOR)
    assert main(["yaml", "insert", str(good), "--block", "CBAM", "--after", "C2f", "--args", "{kernel_size: 4}",
                 "-o", str(out)]) == 2
    assert "out.yaml: the output YAML does not build at scale n" in capsys.readouterr().err
    assert not out.exists()
    assert main(["yaml", "insert", str(good), "--block", "CBAM", "--after", "C2f", "-o", str(out)]) == 0
    assert out.read_text().count("CBAM") == 2


def test_hostile_files_are_refused_by_every_command_without_growing_or_writing(tmp_path):
    """`tools/bench.py untrusted-inputs`: alias bombs (detector YAML, training config, data YAML), 10,000-deep
    YAML and JSON, a 50 MB config; each through the command or API that opens it, in one process."""
    out = tmp_path / "untrusted.json"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py"), "untrusted-inputs", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())["results"]["scenarios"]
    assert len(results) == 11
    for r in results:
        assert r["status"] == 2, r
        assert r["stderr"].startswith("error: ") and r["stderr"].count("\n") == 1, r
        assert r["file"] in r["stderr"], r
        assert r["rss_growth_mb"] < 200, r
        assert r["new_files"] == [], r
