"""The shipped configs by name from any folder: the order a path is looked up in, the scale letter of
a model YAML's name, and `vision-attn configs`."""
import pytest

from vision_attn.cli import main
from vision_attn.io.resources import configs_root, find_shipped, resolve_path, shipped_configs, without_scale
from vision_attn.models import build_detector


def test_shipped_configs_are_split_by_kind():
    kinds = {c.name: c.kind for c in shipped_configs()}
    assert kinds["yolov8"] == kinds["yolov8-cbam"] == kinds["yolo11"] == "model"
    assert kinds["demo_digits"] == "cls" and kinds["demo_digit_boxes"] == "det"
    assert [c.name for c in shipped_configs("*cbam*", kinds=("model",))] == ["yolov8-cbam"]  # no training config
    assert configs_root().joinpath("models", "yolov8.yaml").is_file()


def test_names_and_scales():
    assert without_scale("yolov8n.yaml") == ("yolov8.yaml", "n")
    assert without_scale("yolo11s-cbam.yaml") == ("yolo11-cbam.yaml", "s")
    assert without_scale("swin-t-yolov8.yaml") == ("swin-t-yolov8.yaml", None)
    assert find_shipped("yolov8n.yaml") == find_shipped("yolov8") == configs_root() / "models" / "yolov8.yaml"
    assert find_shipped("demo_digits", ("det",)) is None
    model = build_detector("yolov8s.yaml")
    assert model.scale == "s" and sum(p.numel() for p in model.parameters()) == 11_166_560  # ultralytics' count


def test_a_path_is_read_beside_its_config_then_in_the_cwd_then_shipped(tmp_path, monkeypatch):
    beside, cwd = tmp_path / "beside", tmp_path / "cwd"
    beside.mkdir()
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    (beside / "yolov8.yaml").write_text("mine\n")
    assert resolve_path("yolov8.yaml", base=beside, kinds=("model",)) == beside / "yolov8.yaml"
    (cwd / "yolov8.yaml").write_text("cwd\n")
    assert resolve_path("yolov8.yaml", base=tmp_path, kinds=("model",)).resolve() == (cwd / "yolov8.yaml").resolve()
    (cwd / "yolov8.yaml").unlink()
    assert resolve_path("yolov8.yaml", base=tmp_path, kinds=("model",)) == configs_root() / "models" / "yolov8.yaml"
    assert resolve_path("nothing.yaml", base=tmp_path, kinds=("model",)) is None


def test_configs_command_lists_and_shows(capsys):
    assert main(["configs", "yolo*"]) == 0
    out = capsys.readouterr().out
    assert "yolov8.yaml" in out and "yolo11.yaml" in out and "demo_digits" not in out
    assert main(["configs", "show", "demo_digits"]) == 0
    assert capsys.readouterr().out == (configs_root() / "train" / "classify" / "demo_digits.yaml").read_text()
    assert main(["configs", "show", "nope"]) == 2
    assert "no shipped config" in capsys.readouterr().err


@pytest.mark.parametrize("task, name", [("cls", "demo_digits"), ("det", "demo_digit_boxes")])
def test_train_config_by_name_from_another_folder(tmp_path, monkeypatch, capsys, task, name):
    monkeypatch.chdir(tmp_path)
    assert main(["train", task, "--config", name, "--print-config"]) == 0
    out = capsys.readouterr().out
    if task == "det":
        assert f"yaml: {configs_root() / 'models' / 'yolov8.yaml'}" in out  # resolved, not left relative
    assert main(["train", task, "--config", "no_such_config"]) == 2
    assert "no shipped" in capsys.readouterr().err
