"""Placeholder package; see the README for what lands here."""
