"""router's side of the handoff contract: ConversationStatePort has every method handoff.ports declares.

handoff calls each method by name on whatever port it is given, so a missing or differently shaped
method would only fail when a ticket changes; checked here instead, against the Protocol itself.
"""

from __future__ import annotations

import inspect

import pytest

from handoff.ports import ConversationPort, CustomerUnreachable, DeliveryUnavailable, NullConversationPort, PortError
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
    with pytest.raises(DeliveryUnavailable):
        NullConversationPort().send_to_customer(None, {"id": "t"}, text="hi", sender="agent", agent_id=None)


def test_an_unknown_conversation_is_a_declared_error(pool):
    with pool.connection() as conn:
        ticket = {"id": "t-1", "kind": "handoff", "conversation_id": "00000000-0000-0000-0000-000000000000"}
        with pytest.raises(CustomerUnreachable):
            ConversationStatePort().send_to_customer(conn, ticket, text="hello", sender="agent", agent_id="a-1")
