"""``python -m vision_attn``: the ``vision-attn`` command."""
from vision_attn.cli import main

raise SystemExit(main())
