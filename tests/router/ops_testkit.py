"""The gateway wired like production for the operations tests: the real classifier (small English
encoder), a real knowledge base (tantivy + pgvector) over a tiny bilingual folder, the handoff
queue and the router decider. Plus agents with tokens, to call the supervisor endpoints."""

from __future__ import annotations

import tempfile
import textwrap
from pathlib import Path

KB_DOCS = {
    "returns-en.md": """\
        ---
        id: returns-en
        title: 7-day returns
        lang: en
        category: returns
        ---
        # 7-day returns

        Most items can be returned within 7 days of delivery without giving a reason. Open the order,
        choose Request a return, pick a reason and a courier collects the parcel.
        """,
    "tracking-en.md": """\
        ---
        id: tracking-en
        title: Tracking your order
        lang: en
        category: orders
        ---
        # Tracking your order

        Where is my order? Open My Orders and tap the order to see its status and the tracking number.
        Parcels usually arrive within 2 to 4 days after shipping.
        """,
    "tracking-zh.md": """\
        ---
        id: tracking-zh
        title: 查询订单物流
        lang: zh
        category: orders
        ---
        # 查询订单物流

        打开我的订单，点击订单即可查看订单状态和快递单号。一般发货后二到四天送达。
        """,
}


# A small intents file in the bundled format: the same classifier, fitted in seconds.
INTENTS = """\
version: 1
threshold: null
unknown_tier: L2
intents:
  - name: order_query
    tier: L1
    description: Where is my order, order status.
    rules:
      - type: keywords
        any: ["where is my order", "order status", "查订单", "订单到哪"]
        priority: 10
    examples: ["where is my order", "has my order shipped yet", "track my parcel please", "order status?",
               "我的订单到哪了", "帮我查一下订单", "快递什么时候到"]
  - name: refund_request
    tier: L2
    description: The customer wants a refund.
    rules:
      - type: regex
        pattern: '\\bi\\s+want\\s+a\\s+refund\\b|我要退款'
        priority: 20
    examples: ["i want a refund", "give me my money back", "please refund my order", "refund me now",
               "我要退款", "退钱给我", "申请退款"]
  - name: human_agent
    tier: L3
    description: The customer asks for a person.
    rules:
      - type: keywords
        any: ["转人工", "人工客服", "real person", "human agent"]
        priority: 28
    examples: ["let me talk to a real person", "i need a human agent", "connect me to someone",
               "转人工", "我要人工客服", "找个真人"]
"""


def write_kb(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in KB_DOCS.items():
        (folder / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return folder


def wire_gateway(services, tmp_path: Path):
    """Attach classifier, knowledge base, handoff and the router decider to ``services``, as the
    composition root does, with the knowledge base of :data:`KB_DOCS` (indexed on first start)."""
    from router.app.composition import wire_handoff, wire_rag, wire_router

    services.settings = services.settings.model_copy(update={
        "knowledge_dir": write_kb(tmp_path / "kb"),
        "load_sample_kb": True,
        # the small English encoder's cosines sit lower than multilingual-e5's: "where is my order" meets
        # its article at 0.56, an unrelated question stays under 0.35
        "rag_confidence_center": {"en": 0.45, "zh": 0.45},
    })
    services.encoder = serving(services.encoder)
    services.classifier = shared_classifier(services.encoder)
    wire_handoff(services)
    wire_rag(services)
    wire_router(services)
    return services


_CLASSIFIERS: dict[str, object] = {}
_SERVING: dict[int, object] = {}


def serving(encoder):
    """``encoder`` behind the serving front the composition root puts in front of it (the query cache, which
    also bounds a long message's encoding), one per encoder for the test run (vectors are deterministic)."""
    from rag.encoder_backends import QueryCache

    if isinstance(encoder, QueryCache):
        return encoder
    return _SERVING.setdefault(id(encoder), QueryCache(encoder))


def shared_classifier(encoder):
    """The classifier of :data:`INTENTS` for ``encoder``, built (and its threshold fitted) once per test run:
    it is read-only while routing, so the tests can share it."""
    from router.classify import IntentClassifier
    from router.classify.intents import load_intents

    key = str(getattr(encoder, "path", id(encoder)))
    if key not in _CLASSIFIERS:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "intents.yaml"
            path.write_text(INTENTS, encoding="utf-8")
            _CLASSIFIERS[key] = IntentClassifier.from_config(load_intents(path), serving(encoder))
    return _CLASSIFIERS[key]


def agent_token(services, name: str, role: str) -> str:
    from handoff.agents import add_agent, issue_token

    with services.pool.connection() as conn, conn.transaction():
        add_agent(conn, name, role=role)
        token, _ = issue_token(conn, name)
    return token


def msg(conversation: str, message: str, text: str, *, channel: str = "web", customer: str = "cust-1") -> dict:
    return {"channel": channel, "conversation_id": conversation, "customer_id": customer, "message_id": message,
            "text": text}
