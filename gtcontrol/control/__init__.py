"""What gtcontrol does to a model: reachability, optimal-transport steering, CasADi steering,
and the design of stable attention for mean matching.

Imports the model and analysis layers, never plotting, experiments or the CLI.
"""
