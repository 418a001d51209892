#!/usr/bin/env bash
# The fine-tuning figures of docs/benchmarks.md ("From an ultralytics best.pt"): a detector trained by ultralytics' own trainer, CBAM inserted
# after every backbone C2f with its weights carried through the insertion, evaluated before fine-tuning,
# fine-tuned 4 epochs, against the inserted YAML trained from scratch for the same 4 epochs.
#   1. python tools/peer_ultralytics_det.py --epochs 8 --img-size 160 --batch 32   (prints "run": .../peer)
#   2. tools/finetune_ultralytics_det.sh RUN/weights/best.pt OUT_DIR
# Every mAP below comes from the same evaluation (ours: `vision-attn eval det`, val split, conf 0.001).
set -euo pipefail
BEST=${1:?give the best.pt of an ultralytics run}
OUT=${2:-runs/ultralytics_finetune}
VA=${VA:-vision-attn}
EPOCHS=${EPOCHS:-4}
mkdir -p "$OUT"
evaluate() { $VA eval det --checkpoint "$1" --data demo:digit-boxes --workers 2 --json > "$OUT/$2.json"; }
evaluate "$BEST" source
$VA yaml insert --checkpoint "$BEST" --block CBAM --after C2f -o "$OUT/cbam.yaml" --checkpoint-out "$OUT/cbam.pt"
evaluate "$OUT/cbam.pt" inserted
COMMON=(--config configs/train/detect/demo_digit_boxes_cbam.yaml --model.yaml "$OUT/cbam.yaml" --runs_dir "$OUT"
        --trainer.max_epochs "$EPOCHS" --overwrite true)
$VA train det "${COMMON[@]}" --name finetuned --model.pretrained "$OUT/cbam.pt"
evaluate "$OUT/finetuned/last.ckpt" finetuned
$VA train det "${COMMON[@]}" --name scratch
evaluate "$OUT/scratch/last.ckpt" scratch
for r in source inserted finetuned scratch; do
  python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(f'{sys.argv[2]:10s} mAP@.5 {m[\"map50\"]:.4f}  mAP@[.5:.95] {m[\"map\"]:.4f}')" "$OUT/$r.json" "$r"
done
