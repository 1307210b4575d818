"""Metering read back: per-tenant statements for a period from what Prometheus recorded (statements.py)."""
