"""What the bot understood, one sentence per turn, in English and Chinese, for the agent's context panel.

Built from the conversation's replay (:func:`router.ops.trace.load_trace`): each turn's stored decision and
trace, the tool calls the gateway audited, and the workflow's slots. The sentence says what the customer asked
and where things stand ("asked to change the address of order 100271; waiting for confirmation"). An action is
said to be done only when an audited write or money tool call of that turn returned ``ok`` (with the shop's own
record id when its result carries one); a failed call is said to have failed. Calls made outside a turn (an
approver's decision, an agent confirming for the customer) get a line of their own.

Names of workflows, slots and tools have words here (one table per language, the snake-case name as the
fallback), never a sentence per example.
"""

from __future__ import annotations

from typing import Any

from handoff.reasons import reason_text, words

LANGS = ("en", "zh")
WRITE_RISKS = ("write", "money")

# what a workflow is asking for: (English without an order, English with one, Chinese)
_ASK = {
    "change_address": ("change a delivery address", "change the address of order {order}", "修改收货地址"),
    "refund": ("get a refund", "get a refund for order {order}", "退款"),
    "cancel_order": ("cancel an order", "cancel order {order}", "取消订单"),
    "invoice": ("get an invoice", "get an invoice for order {order}", "开发票"),
    "order_status": ("know an order's status", "know the status of order {order}", "查询订单状态"),
    "return": ("return an order", "return order {order}", "退货"),
    "exchange": ("exchange an item", "exchange an item of order {order}", "换货"),
}
# what a write tool did, as the subject of "... done"
_DONE = {
    "change_address": ("change of address", "修改地址"),
    "request_refund": ("refund", "退款"),
    "cancel_order": ("cancellation", "取消订单"),
    "issue_invoice": ("invoice", "开票"),
}
_SLOT = {
    "order_id": ("the order number", "订单号"), "amount": ("the amount", "金额"), "address": ("the new address", "新地址"),
    "confirmation": ("confirmation", "客户确认"), "title": ("the invoice title", "发票抬头"),
    "reason": ("the reason", "原因"), "tax_id": ("the tax id", "税号"),
}
_RECORD_SKIP = ("order_id", "customer_id", "idempotency_key")


def _words(table: dict[str, tuple[str, str]], name: str | None, lang: str) -> str:
    if not name:
        return ""
    pair = table.get(name)
    return pair[LANGS.index(lang)] if pair else name.replace("_", " ")


def _money(amount: Any, currency: Any) -> str | None:
    try:
        value = float(amount)
    except (TypeError, ValueError):
        return None
    return f"{value:.2f} {currency or ''}".strip()


def _record(output: dict[str, Any]) -> str | None:
    """The shop's own id of what it did (refund_id, invoice_no, ...): the first such field of the result."""
    for key, value in output.items():
        if key not in _RECORD_SKIP and (key.endswith("_id") or key.endswith("_no")) and isinstance(value, str) and value:
            return value
    return None


def _order_of(calls: list[dict[str, Any]], slots: dict[str, Any]) -> str | None:
    for c in reversed(calls):
        order = (c.get("input") or {}).get("order_id") or (c.get("output") or {}).get("order_id")
        if isinstance(order, str) and order:
            return order
    order = slots.get("order_id")
    return str(order) if order else None


def _currency(calls: list[dict[str, Any]]) -> str | None:
    for c in reversed(calls):
        out = c.get("output") or {}
        cur = out.get("currency") or (out.get("order") or {}).get("currency") if isinstance(out, dict) else None
        if cur:
            return str(cur)
    return None


def action_sentence(call: dict[str, Any], lang: str) -> str:
    """A write or money tool call as the audit shows it: done (with amount and the shop's record) or failed."""
    what = _words(_DONE, call.get("tool"), lang)
    out = call.get("output") if isinstance(call.get("output"), dict) else {}
    order = (call.get("input") or {}).get("order_id") or out.get("order_id")
    money = _money(out.get("amount"), out.get("currency")) if "amount" in out else None
    record = _record(out)
    if call.get("status") == "ok":
        if lang == "zh":
            s = f"{'订单 ' + str(order) + ' ' if order else ''}{what}{' ' + money + ' ' if money else ''}已完成"
            return s + (f"（商店记录 {record}）" if record else "")
        s = f"{what}{' of ' + money if money else ''}{' on order ' + str(order) if order else ''} done"
        return s + (f" (shop record {record})" if record else "")
    status = str(call.get("status") or "error")
    if lang == "zh":
        return f"{'订单 ' + str(order) + ' ' if order else ''}{what}未成功（{status}），商店未做更改"
    return f"{what}{' on order ' + str(order) if order else ''} did not go through ({status}); the shop changed nothing"


def _flow_clause(flow: dict[str, Any], slots: dict[str, Any], calls: list[dict[str, Any]], lang: str,
                 unknown: set[str]) -> str | None:
    """The customer's request as the workflow holds it after the turn, and what it waits for. ``unknown``:
    slots the flow asks for at this turn or later (not known yet when the turn ran)."""
    workflow = flow.get("workflow")
    if not workflow:
        return None
    order = _order_of(calls, {} if "order_id" in unknown else slots)
    money = _money(slots.get("amount"), _currency(calls)) if "amount" in slots and "amount" not in unknown else None
    zh = lang == "zh"
    if zh:
        ask = _ASK.get(workflow, ("", "", workflow.replace("_", " ")))[2]
        request = f"要求{ask}{'（订单 ' + order + '）' if order else ''}{'，金额 ' + money if money else ''}"
    else:
        plain, with_order, _ = _ASK.get(workflow, (workflow.replace("_", " "),
                                                   workflow.replace("_", " ") + " (order {order})", ""))
        request = f"asked to {with_order.format(order=order) if order else plain}{' (' + money + ')' if money else ''}"
    status, awaiting = flow.get("status"), flow.get("awaiting")
    if status == "waiting" and awaiting:
        slot = _words(_SLOT, awaiting, lang)
        return f"{request}；等待{slot}" if zh else f"{request}; waiting for {slot}"
    if status == "waiting_approval":
        return f"{request}；等待审批" if zh else f"{request}; waiting for approval"
    if status in ("escalated", "suspended"):
        return f"{request}；流程交由人工处理" if zh else f"{request}; the workflow handed it to a person"
    if status == "cancelled":
        return f"{request}；已取消，未做任何更改" if zh else f"{request}; cancelled, nothing was changed"
    if status == "completed":
        return f"{request}；已根据商店记录答复" if zh else f"{request}; answered from the shop's records"
    return request


def _knowledge_clause(turn: dict[str, Any], lang: str) -> str | None:
    rag = turn.get("retrieval")
    if not rag:
        return None
    zh = lang == "zh"
    if rag.get("answered"):
        titles = [c.get("title") for c in rag.get("candidates") or [] if c.get("title")]
        cited = bool((turn.get("reply") or {}).get("citations"))
        where = f"‘{titles[0]}’" if titles else ("知识库" if zh else "the knowledge base")
        if zh:
            return f"根据{where}作答{'（附引用）' if cited else ''}"
        return f"answered from {where}{' (cited)' if cited else ''}"
    return "无法回答：没有足够可信的依据" if zh else "could not answer: no confident evidence"


def turn_sentence(turn: dict[str, Any], flows: dict[str, dict[str, Any]], lang: str, *,
                  earlier: list[dict[str, Any]] = (), unknown: set[str] = frozenset()) -> str:
    """One turn in one sentence (see the module's docstring). ``earlier``: the conversation's tool calls before
    this turn; ``unknown``: the slots its flow asks for at this turn or later."""
    zh = lang == "zh"
    ticket = turn.get("ticket") or {}
    if ticket.get("added_to"):
        return "在等待人工时再次留言（已加入工单）" if zh else "wrote again while waiting for a person (added to the ticket)"
    decision = turn.get("decision") or {}
    flow = turn.get("flow") or {}
    calls = turn.get("tool_calls") or []
    slots = (flows.get(str(flow.get("instance_id"))) or {}).get("slots") or {}
    parts: list[str] = []
    writes = [c for c in calls if c.get("risk") in WRITE_RISKS]
    clause = _flow_clause(flow, slots, [*earlier, *calls], lang, set(unknown))
    if writes:   # the tool result, not the flow's intention, says what was done
        parts.extend(action_sentence(c, lang) for c in writes)
    elif clause:
        parts.append(clause)
    knowledge = _knowledge_clause(turn, lang)
    if knowledge and not clause:
        parts.append(knowledge)
    if ticket.get("reason"):
        why = reason_text(ticket["reason"])[lang]
        parts.append(f"{why}，已转人工排队" if zh else f"{why[:1].lower() + why[1:]}: queued for a person")
    if not parts:
        intent = decision.get("intent")
        if intent:
            parts.append(f"关于“{words(intent, lang)}”" if zh else f"about “{words(intent, lang)}”")
        else:
            parts.append("没能判断客户的意图" if zh else "could not tell what the customer wants")
    return ("；" if zh else "; ").join(parts)


def _after(call: dict[str, Any], flows: dict[str, dict[str, Any]], lang: str) -> str:
    """Who made a call outside a turn: an agent confirming for the customer, or the flow after its approval."""
    by = str(call.get("turn_id") or "")
    if by.startswith("agent:"):
        who = by.split(":", 1)[1]
        return f"（由 {who} 代客户确认）" if lang == "zh" else f" (confirmed by {who} for the customer)"
    key = str(call.get("idempotency_key") or "")     # flow:<instance>:<step> for a flow's own call
    instance = key.split(":")[1] if key.startswith("flow:") and key.count(":") >= 2 else None
    if instance and (flows.get(instance) or {}).get("approval_ticket"):
        return "（审批通过后）" if lang == "zh" else " (after the approval)"
    return ""


def understood(replay: dict[str, Any], *, limit: int = 30) -> list[dict[str, Any]]:
    """The conversation's last ``limit`` turns as ``{kind: turn, turn_id, at, said, text: {en, zh}}``, and the
    actions run outside a turn as ``{kind: action, call_id, at, text}``, in time order."""
    flows = {f["instance_id"]: f for f in replay.get("flows") or []}
    turns = replay.get("turns") or []
    asked: dict[str, list[tuple[int, str]]] = {}     # instance -> (turn index, slot it waited for)
    for i, turn in enumerate(turns):
        flow = turn.get("flow") or {}
        if flow.get("instance_id") and flow.get("awaiting"):
            asked.setdefault(str(flow["instance_id"]), []).append((i, flow["awaiting"]))
    items: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for i, turn in enumerate(turns):
        instance = str((turn.get("flow") or {}).get("instance_id"))
        unknown = {slot for j, slot in asked.get(instance, []) if j >= i}
        if i >= len(turns) - limit:
            items.append({"kind": "turn", "turn_id": turn["turn_id"], "at": turn["at"],
                          "said": (turn.get("inbound") or {}).get("text"),
                          "text": {lang: turn_sentence(turn, flows, lang, earlier=calls, unknown=unknown)
                                   for lang in LANGS}})
        calls = [*calls, *(turn.get("tool_calls") or [])]
        for ev in turn.get("events_after") or []:
            if ev.get("type") != "tool_call":
                continue
            calls.append(ev)
            if ev.get("risk") in WRITE_RISKS and i >= len(turns) - limit:
                items.append({"kind": "action", "call_id": ev.get("id"), "at": ev.get("at"),
                              "text": {lang: action_sentence(ev, lang) + _after(ev, flows, lang) for lang in LANGS}})
    return items
