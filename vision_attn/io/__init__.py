"""File input and output under every other layer: atomic writes, bounded YAML/JSON readers,
state-dict and checkpoint readers. Each concept is one module here; import them directly
(``from vision_attn.io.atomic import write_text``) so this package's import stays free of torch."""
