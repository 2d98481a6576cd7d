"""Figures for gtcontrol's results (matplotlib's object API, Agg canvas; no pyplot state).

Every function draws on Axes it is given (``ax=``: one Axes, or one per panel) or on a new
detached figure, saves a PNG when given a ``path`` and returns its Axes. The panels themselves
are drawn by the layers' ``_figures`` modules, which the results' ``.plot(ax)`` use too.

Imports the model, analysis and control layers for their result types and drawing code; never
experiments or the CLI.
"""
