"""Figures for gtcontrol's results (matplotlib, Agg backend; no pyplot state).

Imports the model, analysis and control layers for their result types; never experiments or
the CLI.
"""
