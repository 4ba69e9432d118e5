"""Automation: the tool gateway (``automation.tools``) and the workflow engine (``automation.workflows``).

Imports neither ``router`` nor ``handoff``: shared plumbing (the db pool, settings, a redactor) is passed in by
the composition root, and whatever goes back out (approvals, replies) goes through ports.
"""
