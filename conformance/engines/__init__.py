"""Engines behind the `spec.engine.Engine` protocol that live outside the reference: real schedulers over a pipe."""
