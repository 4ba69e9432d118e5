"""Workflows: SOPs written as YAML (steps, slots, CEL conditions) run by a durable engine over the tool gateway.

A regular package, not a namespace one: import-linter's graph and setuptools' package finder both skip
folders without an ``__init__.py``.
"""
