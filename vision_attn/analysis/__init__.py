"""Analysis tools: parameters and FLOPs (``flops``), attention statistics (``attention``); what
``vision-attn demo`` runs lives in ``demo``."""
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
