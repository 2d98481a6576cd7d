"""The validated request of :func:`~.mean_matching.design_mean_matching` (private).

The target, the rates, the rotation, the fixed parts (in original coordinates), the options,
and the start and depth of the predicted path of the finite-N check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._linalg import FloatArray
from ..._validation import as_float_array, as_positive_float, leading_size
from ...errors import InvalidParametersError
from ...model.gaussian import Gaussian
from ._common import coerce_target
from .constructive import check_rotation
from .ess_path import as_initial
from .options import _DesignOptions

__all__ = ["DesignRequest", "parse_request"]


@dataclass
class DesignRequest:
    """Validated input of :func:`design_mean_matching`."""

    target: Gaussian
    r_m: float
    r_c: float
    rotation: FloatArray | None
    fa: FloatArray | None
    fb: FloatArray | None
    fv: FloatArray | None
    minimum_norm: bool
    opts: _DesignOptions
    initial: Gaussian
    T: float | None

    @property
    def scalable(self) -> bool:
        """V and B are both designed: the scale split ``(sV, B/s)`` is free."""
        return self.fb is None and self.fv is None

    @property
    def fixed(self) -> tuple[str, ...]:
        return tuple(
            n for n, x in (("A", self.fa), ("B", self.fb), ("V", self.fv)) if x is not None
        )

    @property
    def constructive(self) -> bool:
        return not self.fixed and not self.minimum_norm and self.opts.V_structure == "scalar"


def _as_fixed(name: str, value: Any, d: int) -> FloatArray | None:
    if value is None:
        return None
    if name == "V" and leading_size("fixed_V", value) is None:
        return float(as_float_array("fixed_V", value, ndim=0)) * np.eye(d)
    return as_float_array(f"fixed_{name}", value, ndim=2, shape=(d, d))


def parse_request(
    target: Any,
    rate: Any,
    cov_rate: Any,
    rotation: Any,
    fixed: tuple[Any, Any, Any],
    minimum_norm: Any,
    opts: _DesignOptions,
    path: tuple[Any, Any],
) -> DesignRequest:
    tgt = coerce_target(target)
    d = tgt.dim
    r_m = as_positive_float("rate", rate)
    r_c = 2.0 * r_m if cov_rate is None else as_positive_float("cov_rate", cov_rate)
    rot = check_rotation(rotation, d)
    fa, fb, fv = (_as_fixed(n, x, d) for n, x in zip("ABV", fixed))
    if not isinstance(minimum_norm, bool):
        raise InvalidParametersError(f"minimum_norm: expected a bool, got {minimum_norm!r}")
    g0 = as_initial(path[0], d)
    depth = None if path[1] is None else as_positive_float("T", path[1])
    req = DesignRequest(tgt, r_m, r_c, rot, fa, fb, fv, minimum_norm, opts, g0, depth)
    if rot is not None and (req.fixed or minimum_norm):
        raise InvalidParametersError(
            "rotation: only the constructive design takes a rotation (no fixed parts, "
            "minimum_norm=False)"
        )
    return req
