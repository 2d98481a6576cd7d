"""What gtcontrol does to a model: reachability, optimal-transport steering, CasADi steering,
the design of stable attention for mean matching (:mod:`.design`), and the stabilization of a
given layer around a target (:mod:`.stabilization`).

Imports the model and analysis layers, never plotting, experiments or the CLI.
"""
