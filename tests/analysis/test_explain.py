"""Class-activation maps (vision_attn.analysis.explain, `vision-attn explain`): the maps are
pytorch-grad-cam's own for the layer and target chosen (a direct call on the same layer gives the same
array), the targets are the run's predictions, and bad input is one line, exit 2, nothing written."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from pytorch_grad_cam import EigenCAM, GradCAM, LayerCAM
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

from tests.analysis.explain_runs import SWIN, VIT, classifier_run, detector_run, write_images
from vision_attn.analysis.explain import cam_map, chosen_method, explain_image, target_layers
from vision_attn.cli import main
from vision_attn.data import load_image
from vision_attn.errors import ConfigError
from vision_attn.tasks import TASKS, load_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("explain")
    return {"vit": classifier_run(tmp / "vit", "vit_tiny_patch16_224", VIT),
            "vit2": classifier_run(tmp / "vit2", "vit_tiny_patch16_224", VIT, seed=1),
            "cnn": classifier_run(tmp / "cnn", "resnet18", {}, img_size=96),
            "swin": classifier_run(tmp / "swin", "swin_tiny_patch4_window7_224", SWIN),
            "det": detector_run(tmp / "det", class_bias=2.0),
            "seg": detector_run(tmp / "seg", yaml="yolov8n-seg.yaml", class_bias=2.0),
            "images": write_images(tmp / "images")}


def _input(run, image_path):
    return TASKS[run.task].explain.to_input(run, load_image(image_path))


def test_cnn_gradcam_is_pytorch_grad_cams_map_of_the_last_stage(runs):
    run = load_run(runs["cnn"])
    x = _input(run, runs["images"][0])
    layers = target_layers(run.model, x)
    assert layers.names == ("layer3.1",)  # the deepest level of >= 4x4 cells (layer4: 3x3); its last block
    ours = cam_map("gradcam", run.model, x, layers, ClassifierOutputTarget(2))
    with GradCAM(model=run.model, target_layers=[run.model.layer3[-1]]) as cam:
        direct = cam(input_tensor=x, targets=[ClassifierOutputTarget(2)])[0]
    assert ours.shape == (96, 96) and ours.max() == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_allclose(ours, direct, atol=1e-6, rtol=0)


def _tutorial_reshape(t, h=4, w=4):  # pytorch-grad-cam's ViT tutorial: drop the class token, NCHW
    return t[:, 1:, :].reshape(t.size(0), h, w, t.size(2)).transpose(2, 3).transpose(1, 2)


def test_vit_tokens_become_the_patch_grid(runs):
    run = load_run(runs["vit"])
    x = _input(run, runs["images"][0])
    layers = target_layers(run.model, x)
    assert layers.names == ("blocks.1.norm1",)
    for method, peer in (("gradcam", GradCAM), ("layercam", LayerCAM)):
        ours = cam_map(method, run.model, x, layers, ClassifierOutputTarget(1))
        with peer(model=run.model, target_layers=[run.model.blocks[-1].norm1], reshape_transform=_tutorial_reshape) as cam:
            direct = cam(input_tensor=x, targets=[ClassifierOutputTarget(1)])[0]
        np.testing.assert_allclose(ours, direct, atol=1e-6, rtol=0)


def test_several_layers_are_pytorch_grad_cams_fusion_of_them(runs):
    """--layer A,B: pytorch-grad-cam's map of both layers (each scaled to 0..1, averaged), not one layer's."""
    run = load_run(runs["vit"])
    x = _input(run, runs["images"][0])
    layers = target_layers(run.model, x, "blocks.0.norm1, blocks.1.norm1")
    assert layers.names == ("blocks.0.norm1", "blocks.1.norm1")
    ours = cam_map("layercam", run.model, x, layers, ClassifierOutputTarget(1))
    with LayerCAM(model=run.model, target_layers=[run.model.blocks[0].norm1, run.model.blocks[1].norm1],
                  reshape_transform=_tutorial_reshape) as cam:
        direct = cam(input_tensor=x, targets=[ClassifierOutputTarget(1)])[0]
    np.testing.assert_allclose(ours, direct, atol=1e-6, rtol=0)
    one = cam_map("layercam", run.model, x, target_layers(run.model, x, "blocks.0.norm1"), ClassifierOutputTarget(1))
    assert np.abs(ours - one).max() > 1e-2
    with pytest.raises(ConfigError, match=r"--layer blocks\.9: no such layer.*candidates, closest first: blocks\.\d"):
        target_layers(run.model, x, "blocks.0,blocks.9")


def test_swin_nhwc_stage_is_permuted(runs):
    run = load_run(runs["swin"])
    x = _input(run, runs["images"][0])
    layers = target_layers(run.model, x)
    assert layers.names == ("layers.1",)
    ours = cam_map("gradcam", run.model, x, layers, ClassifierOutputTarget(0))
    with GradCAM(model=run.model, target_layers=[run.model.layers[-1]],
                 reshape_transform=lambda t: t.permute(0, 3, 1, 2)) as cam:
        direct = cam(input_tensor=x, targets=[ClassifierOutputTarget(0)])[0]
    np.testing.assert_allclose(ours, direct, atol=1e-6, rtol=0)


def test_detector_eigencam_and_box_targets(runs):
    run = load_run(runs["det"])
    record = TASKS["det"].explain
    image = load_image(runs["images"][0])
    x = record.to_input(run, image)
    assert x.shape == (1, 3, 64, 64)
    layers = target_layers(run.model, x)
    assert layers.names == ("model.15", "model.18", "model.21")  # the rows Detect reads
    rows, found = explain_image([run], record, image, "eigencam", [layers], top_k=3)
    with EigenCAM(model=run.model, target_layers=[run.model.model[i] for i in (15, 18, 21)]) as cam:
        direct = cam(input_tensor=x, targets=None)[0]
    np.testing.assert_allclose(rows[0][0].heat, direct, atol=1e-6, rtol=0)
    # gradient methods: a target per detection, the class probability of the anchor it came from
    with torch.no_grad():
        pred = run.model(x)
    targets = record.targets(run, pred, 3)
    assert len(targets) == 3
    for t in targets:
        assert float(t(pred[0])) == pytest.approx(float(t.label.split()[-1]), abs=0.005)
        assert record.align(run, t, pred).score(pred[0]) == t.score(pred[0])  # the same run: the same anchor


def test_a_detections_gradient_map_reads_its_anchors_level(runs):
    run = load_run(runs["det"])
    record = TASKS["det"].explain
    image = load_image(runs["images"][0])
    x = record.to_input(run, image)
    levels = target_layers(run.model, x)
    outputs: dict[int, torch.Tensor] = {}
    hooks = [m.register_forward_hook(lambda _m, _i, out, k=k: outputs.__setitem__(k, out))
             for k, m in enumerate(levels.modules)]
    try:
        pred = run.model(x)
    finally:
        for h in hooks:
            h.remove()
    targets = record.targets(run, pred.detach(), 40)
    seen = set()
    for t in targets:  # the level is the coarsest whose map the score has a gradient on (finer ones feed it)
        grads = torch.autograd.grad(t(pred[0]), [outputs[k] for k in range(3)], retain_graph=True, allow_unused=True)
        reached = [k for k, g in enumerate(grads) if g is not None and bool(g.abs().sum() > 0)]
        assert t.level == max(reached)
        seen.add(t.level)
    assert seen == {0, 1, 2}
    rows, found = explain_image([run], record, image, "layercam", [levels], top_k=40)
    for t, row, f in zip(targets, rows, found):
        assert f["layers"] == [[levels.names[t.level]]]
        if t.level == 2:  # the library's map is pytorch-grad-cam's LayerCAM on that one layer
            with LayerCAM(model=run.model, target_layers=[levels.modules[2]]) as cam:
                direct = cam(input_tensor=x, targets=[t])[0]
            np.testing.assert_allclose(row[0].heat, direct, atol=1e-6, rtol=0)
    assert chosen_method(run, None) == "layercam" and chosen_method(load_run(runs["vit"]), None) == "gradcam"


def test_vit_patch_embedding_layer_is_laid_on_the_grid(runs):
    run = load_run(runs["vit"])
    x = _input(run, runs["images"][0])
    ours = cam_map("gradcam", run.model, x, target_layers(run.model, x, "patch_embed"), ClassifierOutputTarget(1))
    with GradCAM(model=run.model, target_layers=[run.model.patch_embed.proj]) as cam:  # the same values, NCHW
        direct = cam(input_tensor=x, targets=[ClassifierOutputTarget(1)])[0]
    np.testing.assert_allclose(ours, direct, atol=1e-6, rtol=0)


def test_segmenter_instances_are_targets_past_the_mask_coefficients(runs):
    run = load_run(runs["seg"])
    record = TASKS["seg"].explain
    x = record.to_input(run, load_image(runs["images"][1]))
    with torch.no_grad():
        pred = record.output(run.model(x))  # (pred, protos) -> pred (1, 4 + 3 + 32, A)
    assert pred.shape[1] == 4 + 3 + 32
    targets = record.targets(run, pred, 2)
    assert len(targets) == 2
    for t in targets:
        assert float(t(pred[0])) == pytest.approx(float(t.label.split()[-1]), abs=0.005) and t.index < 3
    rows, found = explain_image([run], record, load_image(runs["images"][1]), "gradcam",
                                [target_layers(run.model, x)], top_k=2)
    assert len(rows) == 2 and rows[0][0].heat.shape == (64, 64) and found[0]["box"] == targets[0].box


def test_cli_vs_writes_one_figure_per_image_with_both_runs(runs, tmp_path, capsys):
    out = tmp_path / "maps"
    images = [str(p) for p in runs["images"]]
    assert main(["explain", str(runs["vit"]), *images, "--vs", str(runs["vit2"]), "--top-k", "1", "-o", str(out)]) == 0
    record = json.loads((out / "explain.json").read_text())
    assert [r["image"] for r in record] == images
    assert sorted(p.name for p in out.iterdir()) == ["explain.json", "img0.png", "img1.png"]
    for r in record:
        assert len(r["runs"]) == 2 and len(r["targets"]) == 1 and len(r["targets"][0]["peaks"]) == 2
    assert "img0.png: " in capsys.readouterr().out
    assert main(["explain", str(runs["vit"]), images[0], "--method", "rollout", "-o", str(tmp_path / "r")]) == 0


@pytest.mark.parametrize("args, message", [
    (["det", "IMG", "--method", "rollout"], "--method rollout: not served for det runs"),
    (["cnn", "IMG", "--method", "rollout"], "--method rollout: reads the attention of a ViT/DeiT"),
    (["cnn", "IMG", "--layer", "layer9"], "--layer layer9: no such layer in ResNet; candidates, closest first: layer1,"),
    (["cnn", "IMG", "--layer", "layer4"], "--layer layer4: the forward pass never calls it as one module (its parts "
                                          "are run one by one); name one of them: layer4.0, layer4.1"),
    (["cnn", "IMG", "BAD"], "image BAD: cannot be decoded (not an image"),
    (["cnn", "IMG", "--vs", "det"], "--vs DET/best.ckpt: a det run beside a cls run"),
])
def test_bad_input_is_one_line_exit_2_and_the_old_output_is_kept(runs, tmp_path, capsys, args, message):
    bad = str(runs["images"][0].parent / "bad.png")
    names = {"det": str(runs["det"]), "cnn": str(runs["cnn"]), "IMG": str(runs["images"][0]), "BAD": bad}
    out = tmp_path / "maps"
    out.mkdir()
    (out / "kept.txt").write_text("old")
    assert main(["explain", *[names.get(a, a) for a in args], "-o", str(out)]) == 2
    err = capsys.readouterr().err
    expected = message.replace("BAD", bad).replace("DET", str(runs["det"]))
    assert err.startswith(f"error: {expected}") and err.count("\n") == 1, err
    assert [p.name for p in out.parent.iterdir()] == ["maps"] and [p.name for p in out.iterdir()] == ["kept.txt"]
