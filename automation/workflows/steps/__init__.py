"""The step kinds, one module each; ``REGISTRY`` maps a kind's YAML key to it (the order is the YAML's KINDS)."""

from __future__ import annotations

from automation.workflows.steps.approve import Approve
from automation.workflows.steps.ask import Ask
from automation.workflows.steps.base import REGISTRY, StepContext, StepKind, register
from automation.workflows.steps.call import Call
from automation.workflows.steps.check import Check
from automation.workflows.steps.clear import Clear
from automation.workflows.steps.choose import Choose
from automation.workflows.steps.confirm import Confirm
from automation.workflows.steps.end import End
from automation.workflows.steps.foreach import Foreach
from automation.workflows.steps.handoff import Handoff
from automation.workflows.steps.reply import Reply
from automation.workflows.steps.select import Select
from automation.workflows.steps.set import Set
from automation.workflows.steps.split import Split

register(Ask(), Split(), Choose(), Confirm(), Call(), Set(), Check(), Foreach(), Approve(), Reply(), Handoff(), End())
register(Clear())
register(Select())

KINDS = tuple(REGISTRY)
WAITING_KINDS = tuple(name for name, kind in REGISTRY.items() if kind.waits)

__all__ = ["KINDS", "REGISTRY", "WAITING_KINDS", "StepContext", "StepKind"]
