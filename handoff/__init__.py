"""handoff: the L2 assist and L3 human queue (tickets, claims and leases, SLA, approvals, live events).

It knows nothing of routing or retrieval: tickets arrive with their context package as data,
and conversation state changes go out through :class:`handoff.ports.ConversationPort`.
"""

from handoff.config import HandoffConfig
from handoff.errors import Conflict, Forbidden, HandoffError, Invalid, NotFound, TooLarge, Unauthorized
from handoff.models import Agent
from handoff.ports import ConversationPort, CustomerUnreachable, DeliveryUnavailable, NullConversationPort, PortError
from handoff.service import HandoffService

__all__ = [
    "Agent", "Conflict", "ConversationPort", "CustomerUnreachable", "DeliveryUnavailable", "Forbidden",
    "HandoffConfig", "HandoffError", "HandoffService", "Invalid", "NotFound", "NullConversationPort", "PortError",
    "TooLarge", "Unauthorized",
]
