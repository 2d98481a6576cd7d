"""The version of gtcontrol (one home; the package root and the CLI read it)."""

__version__ = "0.1.0"
