"""fleetops: a declarative, policy-gated AI compute fleet. Data flows spec -> render -> policy -> diff -> apply/report."""

__version__ = "0.1.0"
