"""Engines that are wrong on purpose, to show that each checker catches what it claims.

`planted.py`: divergences planted at a known step; `misbehaving.py`:
engines that fail as programs (raise, hang, die, answer garbage);
`mutant_engines.py`: the reference with one mutant planted, as an engine.
Imports no room.
"""
