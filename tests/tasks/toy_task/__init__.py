"""A task defined outside the library, to show (and test) that adding a task is one package and one
registry line: ``toy`` regresses the mean colour (r, g, b in [0, 1]) of small generated images. Importing
this package registers it; ``vision-attn train|eval|predict toy`` and ``export onnx --checkpoint RUN``
then work with no edit to vision_attn."""
from tests.tasks.toy_task.fit import TOY
from vision_attn.tasks import register_task

register_task(TOY)

__all__ = ["TOY"]
