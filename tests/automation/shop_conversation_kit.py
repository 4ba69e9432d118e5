"""The runner of the example shop's scripted conversations (shop_conversations.jsonl), on real parts.

One MCP shop (started by the real tool gateway over stdio) and one database serve every case: before a
case the shop's data is reloaded (the shop's own loader) and the flows and session memory of earlier
cases are cleared, so each case starts from the sample data. Faults are real: a column the shop reads is
renamed away for one turn (the shop's tool then errors), or a trigger makes every write of one tool fail
during one turn (every attempt of that turn, so a gateway retry after a slow error is refused too).

A case:

    {"id", "workflow", "lang", "customer", "channel"?,
     "before": [{"workflow", "turns"}]?            earlier sessions of the same customer (memory's outcomes)
     "turns": ["text" | {"text", "intent", "confidence"} | {"approve": true|false, "reason"?}],
                                                   a text after the flow ended may start it again (correcting)
     "faults": [{"turn": N, "break": "get_order" | "memory"} | {"turn": N, "fail_write": TOOL}]?,
     "expect": {"status", "outcome"?, "slots": {...}, "writes": [[TOOL, {field: value}]], "tier"?,
                "reply_has"?: [..], "reply_lacks"?: [..]}}

A case completes its task when the flow ends as expected, the shop holds exactly the expected writes
(read with the shop's dump), every expected reply text appears, and no reply claims a write the shop
does not hold. Slot accuracy counts every expected slot value against the flow's final slots.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from automation.tools import Caller
from automation.workflows import store

CASES_FILE = Path(__file__).resolve().parent / "shop_conversations.jsonl"
CHANNELS = ("web", "api", "wechat", "telegram", "whatsapp", "sms", "chatwoot")   # spreads the per-customer rate limit
SUCCESS = {"request_refund": ("已为订单", "Refunded "), "change_address": ("的地址已改为", "will now go to"),
           "issue_invoice": ("已开具", " issued to "), "cancel_order": ("已取消，将退款", "is cancelled;")}
BREAKS = {   # a column only that tool reads, renamed away for one turn
    "get_order": [("orders", "tracking_no")],
    "memory": [("customers", None), ("orders", "position")],
}


def load_cases(path: Path = CASES_FILE) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass
class Verdict:
    case: dict
    completed: bool
    slots_right: int
    slots_total: int
    problems: list[str] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)


class ShopConversations:
    def __init__(self, engine, dsn: str, db):
        from examples.shop.store import Shop

        self.engine = engine
        self.db = db
        self.shop = Shop(dsn, max_size=1)
        self.run_id = uuid.uuid4().hex[:6]

    def close(self) -> None:
        self.shop.close()

    # --- the shop's state ---------------------------------------------------------------------------------

    def reset(self) -> None:
        """Each case starts from the shop's sample data: what the process kept of its customers is dropped too
        (the shop was reloaded under it, which a real shop never does)."""
        from automation.workflows.memory import CUSTOMERS

        self.shop.load(reload="always")
        CUSTOMERS.clear()
        with self.db() as conn:
            conn.execute("DELETE FROM flow_instances")
            conn.execute("DELETE FROM flow_memory")
            conn.execute("DROP TRIGGER IF EXISTS fault ON shop.writes")
            conn.commit()

    def writes(self) -> list[dict]:
        return [w for o in self.shop.dump()["orders"] for w in o["writes"]]

    def _break(self, what: str, on: bool) -> None:
        with self.db() as conn:
            for table, column in BREAKS[what]:
                if column is None:
                    a, b = (table, f"{table}_off") if on else (f"{table}_off", table)
                    conn.execute(f"ALTER TABLE shop.{a} RENAME TO {b}")
                else:
                    a, b = (column, f"{column}_off") if on else (f"{column}_off", column)
                    conn.execute(f"ALTER TABLE shop.{table} RENAME COLUMN {a} TO {b}")
            conn.commit()

    def _fail_writes(self, tool: str | None) -> None:
        with self.db() as conn:
            conn.execute("DROP TRIGGER IF EXISTS fault ON shop.writes")
            if tool is not None:
                conn.execute(f"""CREATE OR REPLACE FUNCTION shop.fault() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN
                      IF NEW.tool = '{tool}' THEN RAISE EXCEPTION 'injected fault'; END IF;
                      RETURN NEW;
                    END $$""")
                conn.execute("CREATE TRIGGER fault BEFORE INSERT ON shop.writes FOR EACH ROW"
                             " EXECUTE FUNCTION shop.fault()")
            conn.commit()

    # --- one engine call in its own transaction, as the router's turn --------------------------------------

    def _turn(self, fn, *args, **kwargs):
        with self.db() as conn:
            with conn.transaction():
                return fn(conn, *args, **kwargs)

    def _session(self, workflow: str, caller: Caller, turns: list, lang: str, faults: list[dict]) -> tuple:
        t, replies = None, []
        for i, item in enumerate(turns):
            item = {"text": item} if isinstance(item, str) else item
            breaks = [f["break"] for f in faults if f.get("turn") == i and "break" in f]
            failing = [f["fail_write"] for f in faults if f.get("turn") == i and "fail_write" in f]
            for tool in failing:
                self._fail_writes(tool)
            for b in breaks:
                self._break(b, True)
            try:
                if "approve" in item:
                    t = self._turn(self.engine.resolve_approval, t.instance_id, bool(item["approve"]),
                                   item.get("approver", "sup-1"), item.get("reason"))
                elif t is None:
                    t = self._turn(self.engine.start, workflow, caller, item["text"], {}, lang)
                elif t.status not in store.ACTIVE:
                    # the flow ended: a message that starts it again (a follow-up, "the other one"), as the
                    # router asks before its classifier; anything else is not the flow's (no reply from it)
                    restart = self._turn(self.engine.correcting, caller.conversation_id, item["text"], {},
                                         intent=item.get("intent"))
                    if restart is None:
                        replies.append("")
                        continue
                    t = self._turn(self.engine.start, restart.workflow, caller, item["text"], {}, lang,
                                   restart=restart)
                else:
                    t = self._turn(self.engine.advance, t.instance_id, caller, item["text"], {}, lang,
                                   intent=item.get("intent"), intent_confidence=item.get("confidence"))
            finally:
                for b in breaks:
                    self._break(b, False)
                if failing:
                    self._fail_writes(None)
            replies.append(t.reply)
        return t, replies

    def run(self, n: int, case: dict) -> Verdict:
        self.reset()
        channel = case.get("channel") or CHANNELS[n % len(CHANNELS)]
        for j, earlier in enumerate(case.get("before") or []):
            who = Caller(channel, case["customer"], conversation_id=f"shop-{self.run_id}-{n}-before{j}")
            self._session(earlier["workflow"], who, earlier["turns"], earlier.get("lang", case["lang"]), [])
        before = len(self.writes())
        caller = Caller(channel, case["customer"], conversation_id=f"shop-{self.run_id}-{n}-{case['id']}")
        t, replies = self._session(case["workflow"], caller, case["turns"], case["lang"], case.get("faults") or [])
        exp = case["expect"]
        problems: list[str] = []
        writes = self.writes()[before:]
        if t.status != exp["status"]:
            problems.append(f"status {t.status} != {exp['status']}")
        if exp.get("outcome") and t.outcome != exp["outcome"]:
            problems.append(f"outcome {t.outcome} != {exp['outcome']}")
        want = exp.get("writes", [])
        got = [(w["tool"], w["result"]) for w in writes]
        if len(got) != len(want) or not all(g[0] == tool and all(g[1].get(k) == v for k, v in fields.items())
                                            for g, (tool, fields) in zip(got, want)):
            problems.append(f"writes {got} != {want}")
        done = {w["tool"] for w in writes}
        for tool, words in SUCCESS.items():
            if tool not in done and any(word in r for r in replies for word in words):
                problems.append(f"a reply claims {tool} without the shop's record")
        everything = "\n".join(replies)
        for text in exp.get("reply_has", []):
            if text not in everything:
                problems.append(f"no reply says {text!r}")
        for text in exp.get("reply_lacks", []):
            if text in everything:
                problems.append(f"a reply says {text!r}")
        if exp.get("tier"):
            asked = [r for _, r in self.engine.approvals.requests if r.instance_id == t.instance_id]
            if not asked or asked[-1].tier != exp["tier"]:
                problems.append(f"approval tier {[r.tier for r in asked]} != {exp['tier']}")
        with self.db() as conn:
            slots = store.get(conn, t.instance_id)["slots"]
        right = sum(1 for k, v in exp.get("slots", {}).items() if slots.get(k) == v)
        total = len(exp.get("slots", {}))
        if right != total:
            problems.append(f"slots {slots} != {exp['slots']}")
        return Verdict(case, not any(not p.startswith("slots ") for p in problems), right, total, problems, replies)
