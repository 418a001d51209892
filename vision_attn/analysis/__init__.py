"""Analysis tools: parameters and FLOPs (``flops``), what a TARGET names (``targets``: model, YAML or
run), timing and memory (``benchmark``), runs side by side (``compare``), attention maps
(``attention_maps``), attention statistics (``attention``); what ``vision-attn demo`` runs lives in
``demo``. Only ``flops`` and ``attention`` are imported here; import the others from their modules."""
from vision_attn.analysis.attention import attention_entropy, uniform_entropy
from vision_attn.analysis.flops import (
    FUSED_ATTENTION_FORMULAS,
    FlopReport,
    count_flops,
    count_model_flops,
    default_input_size,
    flop_counter,
)

__all__ = [
    "FUSED_ATTENTION_FORMULAS", "FlopReport", "count_flops", "count_model_flops", "default_input_size",
    "flop_counter", "attention_entropy", "uniform_entropy",
]
