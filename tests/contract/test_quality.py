"""The public API is importable as documented (ruff and mypy run as their own CI steps)."""

from __future__ import annotations

import warnings

import pytest

import gtcontrol


def test_public_api_is_exported() -> None:
    for name in gtcontrol.__all__:
        assert hasattr(gtcontrol, name), name


def test_unknown_attribute_raises_attribute_error() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError):
            gtcontrol.no_such_name
