"""What gtcontrol says about a model: the Riccati/Bernoulli connection, exact blow-up,
equilibria, regimes, the Kalman–Bucy correspondence, tokens against moments.

Imports the model layer, never control, plotting, experiments or the CLI.
"""
