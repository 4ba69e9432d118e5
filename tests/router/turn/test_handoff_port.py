"""router's side of the handoff contract: ConversationStatePort has every method handoff.ports declares.

handoff calls each method by name on whatever port it is given, so a missing or differently shaped
method would only fail when a ticket changes; checked here instead, against the Protocol itself.
"""

from __future__ import annotations

import inspect

import pytest

from handoff.ports import (
    ConversationPort,
    CustomerUnreachable,
    DeliveryUnavailable,
    NullConversationPort,
    OriginalGone,
    PortError,
)
from router.turn.state import ConversationStatePort

DECLARED = sorted(name for name, member in vars(ConversationPort).items()
                  if callable(member) and not name.startswith("_"))


def _shape(fn) -> list[tuple[str, inspect._ParameterKind]]:
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


def test_the_protocol_declares_every_method_handoff_calls():
    import importlib
    import pkgutil

    import handoff

    called = set()
    for info in pkgutil.iter_modules(handoff.__path__):
        source = inspect.getsource(importlib.import_module(f"handoff.{info.name}"))
        called |= {name for name in DECLARED if f"port.{name}(" in source}
        assert "getattr(self.port" not in source, info.name
    assert called == set(DECLARED), f"declared but never called: {set(DECLARED) - called}"


@pytest.mark.parametrize("port_class", [ConversationStatePort, NullConversationPort])
def test_a_port_implements_the_protocol_with_its_signatures(port_class):
    assert isinstance(port_class(), ConversationPort)
    for name in DECLARED:
        assert _shape(getattr(port_class, name)) == _shape(getattr(ConversationPort, name)), name


def test_the_declared_errors_are_port_errors():
    assert issubclass(CustomerUnreachable, PortError) and issubclass(DeliveryUnavailable, PortError)
    assert issubclass(OriginalGone, PortError)
    with pytest.raises(DeliveryUnavailable):
        NullConversationPort().send_to_customer(None, {"id": "t"}, text="hi", sender="agent", agent_id=None)


def test_an_unknown_conversation_is_a_declared_error(pool):
    with pool.connection() as conn:
        ticket = {"id": "t-1", "kind": "handoff", "conversation_id": "00000000-0000-0000-0000-000000000000"}
        with pytest.raises(CustomerUnreachable):
            ConversationStatePort().send_to_customer(conn, ticket, text="hello", sender="agent", agent_id="a-1")


def test_reveal_reads_only_a_personal_value_of_the_tickets_conversation(pool):
    """The port returns exactly the span the detector finds personal, of a message of this conversation."""
    import uuid

    text = "order 20241130, call 138 1234 5678"
    with pool.connection() as conn:
        conv = conn.execute("INSERT INTO conversations (channel, external_id, customer_id) VALUES ('web', %s, 'c') "
                            "RETURNING id", (uuid.uuid4().hex,)).fetchone()["id"]
        mid = conn.execute("INSERT INTO messages (conversation_id, channel, external_id, direction, sender, text) "
                           "VALUES (%s, 'web', %s, 'in', 'customer', %s) RETURNING id",
                           (conv, uuid.uuid4().hex, text)).fetchone()["id"]
        port, ticket = ConversationStatePort(), {"id": "t-1", "conversation_id": str(conv)}
        at = text.index("138")
        assert port.reveal_value(conn, ticket, message_id=mid, start=at, end=len(text)) == "138 1234 5678"
        for start, end in ((at, len(text) - 1), (6, 14), (0, 5)):   # not a whole value; the order number; a word
            with pytest.raises(OriginalGone):
                port.reveal_value(conn, ticket, message_id=mid, start=start, end=end)
        with pytest.raises(OriginalGone):   # another conversation's message
            port.reveal_value(conn, {**ticket, "conversation_id": str(uuid.uuid4())}, message_id=mid, start=at,
                              end=len(text))
        with pytest.raises(DeliveryUnavailable):
            NullConversationPort().reveal_value(conn, ticket, message_id=mid, start=at, end=len(text))
