"""fleetops: a declarative, policy-gated AI compute fleet. Data flows spec -> render -> policy -> diff -> apply/report."""

import logging

__version__ = "0.1.0"

# A library logs only where its user asks it to (the reconcile service installs JSON logs).
logging.getLogger("fleetops").addHandler(logging.NullHandler())
