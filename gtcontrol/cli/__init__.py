"""The ``gtcontrol`` command: design-file schema, tasks, and outputs.

The top layer: it may import everything else; nothing imports it.
"""

from .main import main

__all__ = ["main"]
