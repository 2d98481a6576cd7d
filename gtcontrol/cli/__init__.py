"""The ``gtcontrol`` command: design-file schema, tasks, and outputs.

The top layer: it may import everything else; nothing imports it.
"""

from .._output import load_result
from .main import main

__all__ = ["load_result", "main"]
