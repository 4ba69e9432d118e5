"""What a step kind is: its YAML keys and load-time check, what it does when run, and, for kinds that
wait for the customer, how it asks and how it reads an answer.

A kind is a ``StepKind`` subclass in its own module under ``steps/``, listed once in ``REGISTRY``
(``steps/__init__.py``). Handlers get one ``StepContext`` (the turn's ``FlowRun``, the step, and the
customer's message when the step was waiting for it) and return an ``Outcome``:

* ``"next"``: go on with the step after this one (its transitions, its sequence, its loop);
* ``"wait"``: the flow waits for the customer's next message at this step;
* ``"stop"``: the flow waits for something else (an approval) or has ended;
* a step id: go there; ``None``: the flow is done.

Step kinds never import the engine (an import contract keeps it so): they act through ``FlowRun``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from automation.workflows.model import COMMON_KEYS, Step, StepSpec, Workflow

if TYPE_CHECKING:
    from automation.workflows.store import Instance
    from automation.workflows.checks import WorkflowChecks
    from automation.workflows.runtime import FlowRun, Restart

Outcome = str | None
S = TypeVar("S", bound=StepSpec)


def spec_of(step: Step, model: type[S]) -> S:
    """The step's typed YAML (built at load; built here for a step made by hand)."""
    spec = step.spec
    if not isinstance(spec, model):
        spec = step.spec = model.model_validate(step.raw)
    return spec


@dataclass
class StepContext:
    """A step's run: the turn, the step, and the message it reads (None when it was not waiting for one)."""

    run: FlowRun
    step: Step
    text: str | None = None
    entities: dict[str, Any] = field(default_factory=dict)

    @property
    def inst(self) -> Instance:
        return self.run.inst

    @property
    def wf(self) -> Workflow:
        return self.run.wf


class StepKind:
    """One kind of step. ``name`` is its YAML key; ``spec`` its YAML model, whose fields (besides the kind's
    own key and the common ones) are the other keys it takes (``keys``)."""

    name: ClassVar[str]
    spec: ClassVar[type[StepSpec]] = StepSpec
    keys: ClassVar[frozenset[str]] = frozenset()
    waits: ClassVar[bool] = False          # it asks the customer and reads the answer
    # running it changes nothing beyond the flow's own instance in memory (no tool call, no ticket, no row): a
    # look ahead at a flow's start (FlowEngine.ahead) may walk it to find the shop reads that follow
    pure: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = {f.alias or n for n, f in cls.spec.model_fields.items()}
        cls.keys = frozenset(fields - COMMON_KEYS - {cls.name})

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        """Its references (slots, names, steps, tools) against the workflow and the tools, at load time."""

    def run(self, ctx: StepContext) -> Outcome:
        raise NotImplementedError

    def asks_for(self, step: Step) -> str | None:
        """The slot the step asks the customer for (a correction of it goes back here)."""
        return None

    def writes(self, step: Step) -> list[str]:
        """The slots the step fills (forgotten when an earlier answer is corrected)."""
        slot = self.asks_for(step)
        return [slot] if slot is not None else []

    # waiting kinds

    def prompt(self, run: FlowRun, step: Step, *, with_prompt: bool = True) -> None:
        """Ask the step's question (the reply parts, quick replies and what is awaited)."""

    def strength(self, run: FlowRun, step: Step, text: str, entities: dict[str, Any]) -> str | None:
        """How surely ``text`` answers the step: ``strong``, ``weak`` (an answer unless plainly something
        else) or None (no answer)."""
        return None

    def repick(self, run: FlowRun, at: Step, text: str, *, dry: bool = False, bare: bool = False) -> str | None:
        """A correction of an earlier pick of this kind while the flow waits at ``at`` ("no, the other one",
        "actually the blue one", "不对，是另一台"): the step to go back to after re-picking, or None. ``dry``:
        only say whether it would, changing nothing; ``bare``: the message answers nothing ``at`` asks, so an
        option named without a correction's words re-picks too."""
        return None

    def names_pick(self, run: FlowRun, at: Step, text: str) -> bool:
        """Whether ``text``, while the flow waits at ``at``, only names what an earlier pick of this kind took
        ("毛巾那个" when the towels' order is the one in hand): the customer agrees, nothing to pick again."""
        return False

    def other_option(self, run: FlowRun, step: Step, text: str, picked: dict[str, Any]) -> Restart | None:
        """After the flow ended: a message that refers to another of the options this step offered than the one
        ``picked`` (its history event) took ("the other one", "the second?", "那个待付款的呢"): the flow started
        again with it (or asking among those it names), or None."""
        return None

    def names(self, run: FlowRun, step: Step, words: str) -> bool:
        """Whether ``words`` of an answer name something the step offers (a price in an option's label): then
        they are the answer, not a value for another slot said beside it."""
        return False

    def takes(self, run: FlowRun, step: Step, text: str, entities: dict[str, Any]) -> bool:
        """Whether ``text``, said before the step asked (to "shall I start it?"), gives what it asks: a value its
        slot reads ("100230", "50"), an option it names ("龙井那个"). Free text (an address, a title) only when the
        slot says what its value looks like (``validate.format``): any statement would be a title otherwise."""
        if self.free_text(run.wf, step):
            slot = run.wf.slots.get(self.asks_for(step) or "")
            if slot is None or "format" not in slot.validate:
                return False
        return self.strength(run, step, text, entities) is not None

    def free_text(self, wf: Workflow, step: Step) -> bool:
        """Any words answer it (an address, a title): a change of mind must then be the whole message."""
        return False


REGISTRY: dict[str, StepKind] = {}


def register(*kinds: StepKind) -> None:
    for kind in kinds:
        REGISTRY[kind.name] = kind


def ask_step_of(wf: Workflow, slot: str) -> Step | None:
    """The step that asks for ``slot``."""
    for s in wf.steps.values():
        if REGISTRY[s.kind].asks_for(s) == slot:
            return s
    return None
