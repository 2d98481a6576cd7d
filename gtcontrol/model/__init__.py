"""The model: Gaussians, layers and schedules, the moment ODE and the token-level Transformer.

The lowest layer of gtcontrol: it imports only the private helpers (``_linalg``,
``_validation``, ``_status``) and ``errors``.
"""
