"""What the decider needs of its collaborators: small typed ports, so its tier actions read as the calls they make.

The composition root (router.app.composition) hands in the real parts: router.classify's IntentClassifier,
rag's KnowledgeBase, handoff's HandoffService and automation's FlowEngine. Each satisfies its port structurally;
the decider and its tier actions (router.turn.tiers) see only these methods.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, Callable, Protocol

import psycopg
from psycopg.rows import DictRow

from automation.tools.base import Caller, ToolGateway
from automation.workflows.listening import Listening
from automation.workflows.model import WorkflowSet
from automation.workflows.runtime import FlowTurn, HandOver, Restart
from automation.workflows.store import Flows, Instance
from rag.rewrite import RewrittenQuery, SearchTokenizer
from rag.types import Answer
from router.classify.base import Classification
from router.classify.intents import IntentConfig

#: the turn's connection: the pool opens every connection with ``row_factory=dict_row`` (router.db.pool)
Conn = psycopg.Connection[DictRow]
#: where the workflow engine's tool calls and memory loads run (automation.workflows.outside.Outside)
Outside = Callable[[Hashable, Callable[[], Any]], Any]


class ClassifierPort(Protocol):
    """router.classify.IntentClassifier: the message's intent, tier and entities; the intents it knows."""

    @property
    def config(self) -> IntentConfig: ...

    def classify(self, text: str, *, pools: Sequence[Sequence[str]] = ()) -> Classification: ...


class Rewriter(Protocol):
    def rewrite(self, query: str) -> RewrittenQuery: ...


class KnowledgePort(Protocol):
    """rag.service.KnowledgeBase: a grounded answer (or why there is none) with its passages."""

    @property
    def rewriter(self) -> Rewriter: ...

    @property
    def tokenizer(self) -> SearchTokenizer: ...

    def answer(self, query: str, *, prefer: Callable[[str], bool] | None = None) -> Answer: ...


class HandoffPort(Protocol):
    """handoff.commands.HandoffService, the router's side: tickets opened and added to in the turn's transaction."""

    def active_ticket(self, conn: psycopg.Connection[Any], conversation_id: str) -> dict[str, Any] | None: ...

    def queue_position(self, conn: psycopg.Connection[Any], conversation_id: str) -> dict[str, Any] | None: ...

    def add_customer_message(self, conn: psycopg.Connection[Any], ticket_id: Any, text: str,
                             notes: list[str] | None = None, message_id: int | None = None) -> None: ...

    def open_ticket(self, conn: psycopg.Connection[Any], *, kind: str, conversation_id: str, channel: str,
                    customer_id: str, reason: str, priority: str = "normal", context: dict[str, Any],
                    draft: dict[str, Any] | None = None, amount: float | None = None, currency: str | None = None,
                    notes: list[str] | None = None) -> dict[str, Any]: ...

    def publish(self, conn: psycopg.Connection[Any], notes: list[str]) -> None: ...

    def fill_memory(self, conn: psycopg.Connection[Any], ticket_id: Any, memory: dict[str, Any] | None,
                    status: str) -> bool: ...


class FlowsPort(Protocol):
    """automation.workflows.engine.FlowEngine: the conversation's workflows, one entry for a turn (``on_message``)
    plus what the router asks around it (an offer after an answer, a correction, an interrupted task)."""

    workflows: WorkflowSet
    tools: ToolGateway   # the gateway's ``turn_deadline()`` and ``flush_audit(timeout)`` are used when it has them
    outside: Outside

    def active(self, conn: Any, conversation_id: str) -> Instance | None: ...

    def overview(self, conn: Any, conversation_id: str) -> Flows: ...

    def offered(self, instance: Instance | None) -> bool: ...

    def read(self, instance: Instance, text: str, entities: dict[str, Any] | None = None, *,
             intent: str | None = None, intent_confidence: float | None = None) -> str: ...

    def lapse(self, conn: Any, instance: Instance) -> None: ...

    def listen(self, instance: Instance | None, text: str, entities: dict[str, Any] | None = None, *,
               intent: str | None = None, intent_confidence: float | None = None) -> Listening | None: ...

    def on_message(self, conn: Any, caller: Caller, text: str, entities: dict[str, Any] | None = None, *,
                   lang: str = "en", listening: Listening | None = None, workflow: str | None = None,
                   intent: str | None = None, intent_confidence: float | None = None,
                   restart: Restart | None = None, flows: Flows | None = None) -> FlowTurn | None: ...

    def offer(self, conn: Any, workflow: str, caller: Caller, text: str = "", entities: dict[str, Any] | None = None,
              lang: str = "en", *, intent: str | None = None) -> FlowTurn: ...

    def done_lately(self, conn: Any, conversation_id: str, workflow: str, text: str = "",
                    entities: dict[str, Any] | None = None, window_seconds: float = 1800.0) -> bool: ...

    def correcting(self, conn: Any, conversation_id: str, text: str, entities: dict[str, Any] | None = None,
                   window_seconds: float = 1800, *, intent: str | None = None,
                   flows: Flows | None = None) -> Restart | None: ...

    def ended(self, conn: Any, conversation_id: str, text: str, entities: dict[str, Any] | None = None,
              window_seconds: float = 1800, *, intent: str | None = None, intent_confidence: float | None = None,
              flows: Flows | None = None) -> str | None: ...

    def suspend(self, conn: Any, instance: Instance, *, because: str) -> None: ...

    def queue(self, conn: Any, workflow: str, caller: Caller, text: str = "", entities: dict[str, Any] | None = None,
              lang: str = "en", *, intent: str | None = None) -> FlowTurn: ...

    def resume(self, conn: Any, conversation_id: str, lang: str | None,
               caller: Caller | None = None, *, kept_only: bool = False) -> FlowTurn | None: ...

    def hand_over(self, conn: Any, conversation_id: str, lang: str,
                  asked: list[str] | tuple[str, ...] = ()) -> HandOver | None: ...

    def memory(self, conn: Any, caller: Caller, lang: str = "en") -> dict[str, Any]: ...

    def ahead(self, conn: Any, workflow: str, caller: Caller, text: str = "", entities: dict[str, Any] | None = None,
              lang: str = "en", *, new: bool = False, first_contact: bool = False) -> str | None: ...


class EncoderPort(Protocol):
    """The serving encoder: query vectors, cached per text (a long message is encoded before its turn)."""

    def encode_queries(self, texts: list[str]) -> Any: ...


if TYPE_CHECKING:   # the real parts satisfy their ports: mypy checks these returns
    from automation.workflows.engine import FlowEngine
    from handoff.service import HandoffService
    from rag.service import KnowledgeBase
    from router.classify.base import IntentClassifier

    def _classifier(real: IntentClassifier) -> ClassifierPort:
        return real

    def _knowledge(real: KnowledgeBase) -> KnowledgePort:
        return real

    def _handoff(real: HandoffService) -> HandoffPort:
        return real

    def _flows(real: FlowEngine) -> FlowsPort:
        return real
