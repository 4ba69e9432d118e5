"""The router's side of workflows: who the caller is, and human approvals as handoff tickets.

A workflow's caller is the verified identity of the conversation (its channel and the customer id
the channel or the integration key vouched for), never anything the customer typed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from automation.tools import Caller

log = logging.getLogger(__name__)

TIER_LEVEL = {"supervisor": "supervisor", "manager": "manager", "director": "director"}
APPROVAL_TRANSCRIPT = 20   # the conversation's last messages in an approval ticket's context


def caller_of(conversation: dict[str, Any], turn_id: str | None = None) -> Caller | None:
    """The conversation's verified customer, or None when the channel gave no customer id."""
    customer = conversation.get("customer_id")
    if not customer:
        return None
    return Caller(channel=conversation["channel"], customer_id=str(customer),
                  conversation_id=str(conversation["id"]), turn_id=turn_id)


class HandoffApprovals:
    """The workflow engine's ApprovalPort over the handoff queue: one ``approval`` ticket per request.

    The ticket carries the amount and currency (so handoff computes the approval level an approver
    needs), the tier the workflow asked for and the exact call that runs once approved; the
    approver decides it with the handoff API's approve / reject, and the conversation port then
    resumes the flow in that same transaction.
    """

    def __init__(self, handoff: Callable[[], Any]):
        self._handoff = handoff   # resolved late: the handoff service is wired independently

    def open_approval(self, conn, request) -> str:
        handoff = self._handoff()
        if handoff is None:
            raise RuntimeError("no handoff service: an approval cannot be opened")
        proposed = request.proposed_call or {}
        summary = (f"{proposed.get('tool')} {request.amount:g} {request.currency or ''}".strip()
                   + f" (order {request.order})" if request.order is not None else "")
        draft = {"text": None, "intent": request.workflow, "action": proposed, "instance_id": request.instance_id,
                 "proposed_action": summary or f"{request.workflow} needs approval"}
        # what the approver reads beside the amount: who asks and what they said (the request, not only "yes")
        said = conn.execute(
            "SELECT id, direction, sender, text, received_at FROM (SELECT * FROM messages WHERE conversation_id = %s"
            " ORDER BY id DESC LIMIT %s) m ORDER BY id", (request.conversation_id, APPROVAL_TRANSCRIPT)).fetchall()
        context = {
            "conversation": {"id": request.conversation_id, "channel": request.customer.get("channel")},
            "customer": {"customer_id": request.customer.get("customer_id"),
                         "channel": request.customer.get("channel")},
            "transcript": [{"message_id": m["id"], "direction": m["direction"], "sender": m["sender"],
                            "text": m["text"], "at": m["received_at"].isoformat()} for m in said],
            "approval": {"instance_id": request.instance_id, "workflow": request.workflow, "step": request.step,
                         "amount": request.amount, "currency": request.currency, "tier": request.tier,
                         "order": request.order, "proposed_call": proposed, "evidence": request.evidence,
                         "lang": request.lang},
        }
        ticket = handoff.open_ticket(
            conn, kind="approval", conversation_id=request.conversation_id,
            channel=request.customer.get("channel") or "api", customer_id=request.customer.get("customer_id") or "",
            reason=f"{request.workflow}: {request.amount:g} {request.currency or ''} needs {request.tier} approval",
            priority="normal", context=context, draft=draft, amount=float(request.amount),
            currency=request.currency)
        return str(ticket["id"])

    def withdraw_approval(self, conn, ticket_id: str, reason: str) -> None:
        """The customer cancelled while the approval waited: the ticket is cancelled in the turn's transaction
        (after the conversation lock the turn holds, the order every ticket writer takes), so an approver's
        later approve or reject gets 409 and nothing runs. A ticket closed already is left as it is."""
        from handoff.errors import Conflict, NotFound

        handoff = self._handoff()
        if handoff is None:
            return
        try:
            handoff.cancel_ticket(conn, ticket_id, reason=f"withdrawn: {reason}", actor="customer")
        except (Conflict, NotFound) as exc:
            log.info("approval ticket %s not withdrawn: %s", ticket_id, exc)
