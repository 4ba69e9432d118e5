"""What the customer says, mapped to the shop's own data: several requests in one message, option words,
the cheapest choice and addresses given in part.

These are plain functions so that a workflow can use them from YAML: the ``split`` step calls
:func:`split`, and CEL gets ``options_in(text, variants)``, ``synonyms(value)`` and
``address_edit(text, address)`` (registered in ``automation.workflows.expr``). A shop's words for its
option values (``vocabulary`` in the workflows file: "medium" is ``M``, "半拉链" is ``half zipper``) are
set per workflow by the engine through :data:`VOCABULARY`; a word the vocabulary lacks is matched to the
option values fuzzily.
"""

from __future__ import annotations

import contextvars
import re
from difflib import SequenceMatcher
from typing import Any

from text import address as _address
from text.normalise import normalise

# {group: {shop value: [words]}}; a group named like a product option (size, color) maps that option
VOCABULARY: contextvars.ContextVar[dict[str, dict[str, list[str]]]] = contextvars.ContextVar("vocabulary", default={})

_SEPARATORS = re.compile(r"\s*(?:[,;，；。]|\band then\b|\bthen\b|\band also\b|\band\b|\balso\b|\bplus\b|然后|还有|另外|并且|同时|以及|和|再把|再)\s*",
                         re.I)
_CHANGE_MARKERS_EN = re.compile(r"\s(?:for|to|into|with)\s", re.I)
_CHANGE_MARKERS_ZH = re.compile(r"(?:换成|改成|换为|改为|变成|换个|换一个|成)")
_LEAD_ZH = re.compile(r"^(?:把|将|给我把|帮我把|帮我|我要|我想|请)")
_BA = re.compile(r"(?:把|将)(.+)$")
_TAIL_ZH = re.compile(r"(?:我们?)?(?:想要|想|要|希望|打算|需要)$")
_FOR_ITEM = re.compile(r"\s(?:for|on|of)\s+((?:the|my|this|that|order)\b.*|[A-Z]{1,4}[-#]?\d{3,10}\b.*)$", re.I)
_PRONOUN = re.compile(r"(?:it|them|this|that|one|this one|that one|those|these)?", re.I)
_ASKING = re.compile(r"\b(?:i(?:'d| would)? (?:like|want|need) to|i'd like to|can you|could you|please|i want|"
                     r"i'd like|let's|help me)\b|\b(?:[A-Z]{1,4}[-#]?\d{3,10}|#\d{3,12})\b\s*:?", re.I)
_CHEAPEST = re.compile(r"(cheapest|least expensive|lowest price|cheaper one|最便宜|便宜的|价格最低|最低价)", re.I)
_CJK = re.compile(r"[\u4e00-\u9fff]")


def _norm(text: str) -> str:
    return normalise(text, case="lower", simplify="never", spaces="keep").strip()


def _has(text: str, word: str) -> list[tuple[int, int]]:
    """Spans of ``word`` in ``text`` (both normalised): whole words for Latin text, substrings for CJK."""
    w = _norm(word)
    if not w:
        return []
    if _CJK.search(w):
        return [(m.start(), m.end()) for m in re.finditer(re.escape(w), text)]
    return [(m.start(), m.end()) for m in re.finditer(rf"(?<![a-z0-9]){re.escape(w)}(?![a-z0-9])", text)]


def prefers_cheapest(text: str) -> bool:
    return bool(_CHEAPEST.search(text or ""))


def split(text: str, kinds: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The requests of one message, in the customer's order.

    The message is cut at separators (",", "and", "then", "，", "然后", "再"...); a piece that names a kind
    (its words, declared per shop) starts a request; a piece that names none is another request of the
    same kind ("return the hose and the lamp"), or, if it only states a preference ("the cheapest"), part
    of the request before. Each request carries the words about the current item (``item``)
    apart from the wanted change (``change``, after "for" / "to" / "换成"), and ``cheapest``.
    """
    raw = _protect_addresses(normalise(text, case="keep", simplify="never", spaces="keep").strip())
    pieces = [p.replace(_KEEP, ",") for p in _SEPARATORS.split(raw) if p and p.strip()]
    out: list[dict[str, Any]] = []
    order: str | None = None          # an order id said before the requests ("W1001: swap ...") holds for them
    lead: str | None = None
    for piece in pieces:
        low = piece.lower()
        ids = _order_ids(piece)
        found = []
        for kind, words in kinds.items():
            for w in words:
                for s, e in _has(low, w):
                    found.append((s, -(e - s), kind, e))
        if not found:
            if out and not out[-1]["item"] and piece.strip():
                # "我要换黑色的，订单100234里的耳机": the target came first; this piece names the item
                out[-1]["item"] = _without_order(piece)
                out[-1]["order"] = ids[0] if ids else out[-1].get("order")
                out[-1]["text"] += ", " + piece.strip()
            elif out and ids and not _without_order(piece):   # "..., 订单100234": the order of the request before
                out[-1]["order"] = out[-1].get("order") or ids[0]
            elif out and (prefers_cheapest(piece) or _continues_change(out[-1], piece)):
                # "..., the cheapest one", "for a large, blue, waterproof one": the request before goes on
                out[-1]["text"] += ", " + piece.strip()
                out[-1]["change"] = (out[-1]["change"] + ", " + piece.strip()).strip()
            elif out:   # "return the hose and the lamp": another request of the same kind
                out.append({"kind": out[-1]["kind"], "text": piece.strip(), **_parts(piece, 0, 0),
                            "order": ids[0] if ids else out[-1].get("order")})
            elif ids:
                order = ids[0]
            else:
                lead = piece.strip()   # "the jacket, I want to exchange it ...": the item, named first
            continue
        start, _, kind, end = min(found)
        parts = _parts(piece, start, end)
        if lead and _PRONOUN.fullmatch(parts["item"]):
            parts = {"item": lead, "change": lead if parts["change"] == parts["item"] else parts["change"]}
        elif lead and wants_only(lead) and (parts["change"] == parts["item"] or not _content(parts["change"])):
            parts["change"] = _content(lead)   # "想要大号的，把H2003的外套换一下": the wanted change, said before the item
        lead = None
        if ids:   # "W1001 的外套": the order id is the request's order, not words about the item
            parts["item"] = _without_order(parts["item"])
        out.append({"kind": kind, "text": piece.strip(), **parts, "order": ids[0] if ids else order})
    for i, r in enumerate(out):
        r["index"] = i
        r["cheapest"] = prefers_cheapest(r["text"])
    return out


_ORDER_WORDS = re.compile(r"(?:订单号?|(?<![a-z])order\s+)?\s*(?<![A-Za-z0-9])(?:[A-Z]{1,4}[-#]?\d{3,10}|#\d{3,12}|\d{6,12})"
                          r"(?![A-Za-z0-9])\s*(?:里面的|里的|中的|的|里)?", re.I)
# a Chinese want said without the item: an attribute made a noun ("黑色的", "大号的") or the shop's option words
_ZH_TARGET = re.compile(r"^[^，,。]{1,8}的$")
_ZH_FILLER = re.compile(r"^(?:我|我们)?(?:想要|想|要|希望|需要)?|(?:一下|一个|一副|一件|了|吧)$")


def _without_order(text: str) -> str:
    """The words about an item without the order that holds it ("订单100234的耳机" -> "耳机")."""
    return _LEAD_ZH.sub("", _ORDER_WORDS.sub(" ", text.strip())).strip(" 的:：,，")


def _content(text: str) -> str:
    return _ZH_FILLER.sub("", _ZH_FILLER.sub("", (text or "").strip(" ，,。"))).strip()


def _nouns() -> list[str]:
    return [w for value, ws in (VOCABULARY.get().get("title") or {}).items() for w in (value, *ws)]


def wants_only(text: str) -> bool:
    """Words that state a wanted option and name no item: "黑色的", "想要大号的", "in black" (the vocabulary's
    option words, outside its ``title`` group of things)."""
    t = _norm(_content(text))
    if not t or any(_has(t, w) for w in _nouns()) or _order_ids(text):
        return False
    if _CJK.search(t) and _ZH_TARGET.match(t.rstrip("了吧")):
        return True
    return any(_has(t, w) for group, entries in VOCABULARY.get().items() if group != "title"
               for value, ws in entries.items() for w in (value, *ws))


_KEEP = "\u0001"   # a comma inside an address: not a separator
_ADDRESS_EN = re.compile(r"(?<![\w-])\d{1,6}[A-Za-z]?\s+[A-Za-z][^;。\n]{0,80}?\b\d{5}(?:-\d{4})?\b"
                         r"(?:\s*,\s*(?:USA|US|United States))?"
                         r"|\b[A-Z][a-z]+(?:\s[A-Z][a-z]+)?,\s*(?:[A-Z]{2}|[A-Z][a-z]+(?:\s[A-Z][a-z]+)?)\s+\d{5}(?:-\d{4})?\b")
_ORDER_TOKEN = re.compile(r"(?<![A-Za-z0-9])(?:[A-Z]{1,4}[-#]?\d{3,10}|#\d{3,12}|\d{6,12})(?![A-Za-z0-9])")


def _protect_addresses(text: str) -> str:
    """Commas inside a postal address ("77 Harbor Road, Suite 12, Portland, OR 97201") are not request
    separators: they are kept aside while the message is cut."""
    return _ADDRESS_EN.sub(lambda m: m.group(0).replace(",", _KEEP), text)


def _order_ids(piece: str) -> list[str]:
    text = _ADDRESS_EN.sub(" ", piece.replace(_KEEP, ","))   # a zip code is not an order id
    return [t.lstrip("#") for t in _ORDER_TOKEN.findall(text)]


_ITEM_LEAD = re.compile(r"^(?:the|my|that|this|those|these|both|all|把|将|那个|这个|还有|另外)\b|^(?:把|将|那个|这个|还有|另外)",
                        re.I)


def _continues_change(request: dict[str, Any], piece: str) -> bool:
    """A piece after a request with an explicit change ("swap the jacket for a large, blue, waterproof one",
    "换成大号，蓝色，防水的"), short and not naming another item ("the lamp", "把台灯"): more of that change."""
    if request.get("change") == request.get("item") or not request.get("change"):
        return False
    p = piece.strip()
    if _ITEM_LEAD.search(p) or _order_ids(p):
        return False
    return len(p.split()) <= 3 if not _CJK.search(p) else len(p) <= 6


def _parts(piece: str, start: int, end: int) -> dict[str, str]:
    """Words about the current item and words about the wanted change, around the kind word."""
    after = piece[end:]
    zh = _CHANGE_MARKERS_ZH.search(piece[start:])
    if _CJK.search(piece) and zh:
        m_start, m_end = start + zh.start(), start + zh.end()
        item = (piece[:start] + " " + piece[end:m_start] if m_start >= end else piece[:m_start])
        change = piece[m_end:]
    elif _CJK.search(piece) and (_BA.search(piece[:start]) or wants_only(after) or not _content(after)):
        # "把100234里的耳机换黑色": the object of 把 is the item, what follows the verb the change;
        # "黑色的耳机换一副": the item before the verb; "我要换黑色的": a want with no item (a later piece names it)
        ba = _BA.search(piece[:start])
        item = ba.group(1) if ba else ("" if _content(after) else piece[:start])
        change = after if _content(after) else item
    else:
        m = _CHANGE_MARKERS_EN.search(after)
        if m:
            item, change = after[:m.start()], after[m.end():]
            target = _FOR_ITEM.search(change)
            if target and _ORDER_TOKEN.match(target.group(1)):
                change = change[:target.start()]   # "... to size 12 for W1003": the order, kept in `order`
            elif target and m.group(0).strip().lower() in ("to", "into", "with"):
                # "change the size to large for my jacket": the target first, the item after "for"
                item, change = target.group(1), (item + " " + change[:target.start()]).strip()
        else:
            item = piece[:start] + " " + after if _CJK.search(piece) else after
            change = item
        if not _CJK.search(piece) and _PRONOUN.fullmatch(item.strip()):
            # "the jacket, I want to exchange it for a large": the item is named before the kind word
            before = _ASKING.sub("", piece[:start]).strip(" ,:")
            if before:
                item = before
                if not m:
                    change = item
    item = _TAIL_ZH.sub("", _LEAD_ZH.sub("", item.strip()).strip(" 的掉了")).strip(" 的")
    change = change.strip(" 的")
    return {"item": item.strip(), "change": change.strip() or item.strip()}


# ---------------------------------------------------------------- option words

def _values(variants: Any) -> dict[str, set[str]]:
    vals: dict[str, set[str]] = {}
    for v in variants or []:
        opts = v.get("options") if isinstance(v, dict) and isinstance(v.get("options"), dict) else v
        if isinstance(opts, dict):
            for k, x in opts.items():
                vals.setdefault(str(k), set()).add(str(x))
    return vals


def options_in(text: str, variants: Any) -> dict[str, str]:
    """The option values the text names, as ``{option: value}`` of the shop's own values.

    ``variants`` is a product's variants (or option maps): only their options and values count. A word is
    matched by the shop's vocabulary first, then by the value itself, then fuzzily (a typo of a value).
    """
    t = _norm(text)
    if not t:
        return {}
    vals = _values(variants)
    vocab = VOCABULARY.get()
    taken: list[tuple[int, int]] = []
    candidates: list[tuple[int, int, str, str]] = []   # (-length, start, option, value)
    for option, values in vals.items():
        words = vocab.get(option, {})
        for value in values:
            said = [value] + [w for k, ws in words.items() if _norm(k) == _norm(value) for w in ws]
            for w in said:
                nw = _norm(w)
                if len(nw) < 2 and not nw.isdigit():
                    spans = [(m.start(1), m.end(1)) for m in re.finditer(rf"\bsize\s+({re.escape(nw)})(?![a-z0-9])", t)]
                else:
                    spans = _has(t, nw)
                for s, e in spans:
                    candidates.append((-(e - s), s, option, value))
    found: dict[str, str] = {}
    for neg, s, option, value in sorted(candidates):
        e = s - neg
        if option in found or any(s < b and a < e for a, b in taken):
            continue
        found[option] = value
        taken.append((s, e))
    for word in re.findall(r"[a-z][a-z-]{3,}", t):   # a typo of a value: "waterprof", "leathr"
        if any(a <= t.find(word) < b for a, b in taken):
            continue
        best = None
        for option, values in vals.items():
            if option in found:
                continue
            for value in values:
                r = SequenceMatcher(None, word, _norm(value)).ratio()
                if len(value) >= 4 and r >= 0.85 and (best is None or r > best[0]):
                    best = (r, option, value)
        if best:
            found[best[1]] = best[2]
    return found


def synonyms(value: Any) -> list[str]:
    """The shop's words for one of its values (every vocabulary group), e.g. a product title's zh name."""
    v = _norm(str(value))
    return [w for group in VOCABULARY.get().values() for k, ws in group.items() if _norm(k) == v for w in ws]


# ---------------------------------------------------------------- addresses in part

_LINE2 = re.compile(r"\b((?:suite|ste|apt|apartment|unit|room|flat|floor)\.?\s*#?\s*[\w-]+)", re.I)
_LINE2_ZH = re.compile(r"(?:门牌号?|房间号?|房号|室号?|单元)\s*(?:号)?\s*(?:改成|改为|换成|是|为|:|：)?\s*([0-9A-Za-z-]+)")
_ZIP = re.compile(r"(?:\bzip(?:\s*code)?|\bpostcode|\bpostal code|邮编|邮政编码)\s*(?:is|to|改成|改为|是|为|:|：)?\s*([0-9]{5,6})", re.I)
_LINE1 = re.compile(r"\b(\d{1,6}\s+[A-Za-z][A-Za-z .'-]*?\s(?:st|street|rd|road|ave|avenue|blvd|boulevard|dr|drive|ln|lane|way))\b\.?",
                    re.I)
_LINE1_ZH = re.compile(r"(?:街道|地址第一行|路名)\s*(?:改成|改为|是|为)\s*([^，,。]+)")
_CITY = re.compile(r"\bcity\s*(?:is|to)?\s*([A-Z][A-Za-z ]+?)(?=[,.;]|$)")
_CITY_ZH = re.compile(r"城市\s*(?:改成|改为|是|为)\s*([\u4e00-\u9fffA-Za-z ]+?)(?=[，,。]|$)")


def address_edit(text: str, base: Any) -> dict[str, Any] | None:
    """The base address (the shop's fields) with the parts the text changes ("Suite 641, otherwise the same",
    "门牌改成641", "18 Oak Lane, Apt 5, San Jose, CA 95112"), or null when the text changes no part of an
    address. The result has the base's fields only."""
    if not isinstance(base, dict):
        return None
    raw = normalise(text, case="keep", simplify="never", spaces="keep")
    old = to_model(base)
    said = _address.find(raw) if re.search(r"\d", raw) else {}
    if _address.is_whole(said):   # a whole address: nothing of the old one kept (but its country)
        whole = {k: said.get(k) for k in _address.FIELDS}
        whole["country"] = said.get("country") or old.get("country")
        return to_shop(whole, like=base)
    new = dict(old)
    changed = False
    for pattern, key in ((_LINE2_ZH, "line2"), (_ZIP, "zip"), (_LINE1_ZH, "line1"), (_CITY_ZH, "city"),
                         (_CITY, "city"), (_LINE1, "line1")):
        m = pattern.search(raw)
        if m and key not in [k for k in new if new.get(k) != old.get(k)]:
            new[key] = m.group(1).strip()
            changed = True
    m = _LINE2.search(raw)
    if m and new.get("line2") == old.get("line2"):
        value = re.sub(r"\s+", " ", m.group(1)).strip()
        new["line2"] = value[:1].upper() + value[1:]
        changed = True
    if not changed and said and all(re.search(r"\d", said.get(k, "0")) for k in ("line1", "zip")):
        new.update(said)   # parts only ("San Jose, California 95112"): the rest kept
        changed = True
    return to_shop(new, like=base) if changed else None


# ---------------------------------------------------------------- one address model, the shop's fields

DEFAULT_ADDRESS = {"fields": {k: k for k in ("line1", "line2", "city", "state", "zip", "country")}, "defaults": {}}
# the workflow's `address:` section: {fields: {model field: shop field}, defaults: {model field: value}}
ADDRESS: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("address", default=DEFAULT_ADDRESS)


def to_model(address: Any) -> dict[str, Any]:
    """A shop's address (its own field names) in the model's fields (line1, line2, district, city...)."""
    if not isinstance(address, dict):
        return {}
    fields = ADDRESS.get().get("fields") or DEFAULT_ADDRESS["fields"]
    return {m: address[s] for m, s in fields.items() if s in address}


def to_shop(model: Any, like: Any = None) -> dict[str, Any]:
    """The model in the shop's field names (a district the shop has no field for leads line1); with ``like``
    (an address of the shop), only its fields, the others kept as they were."""
    if not isinstance(model, dict):
        return {}
    conf = ADDRESS.get()
    fields = conf.get("fields") or DEFAULT_ADDRESS["fields"]
    m = {**(conf.get("defaults") or {}), **{k: v for k, v in model.items() if v not in (None, "")}}
    if m.get("district") and "district" not in fields:
        sep = "" if _address.is_zh(str(m["district"])) else ", "
        m["line1"] = sep.join(str(x) for x in (m.pop("district"), m.get("line1")) if x)
    out = {fields[k]: v for k, v in m.items() if k in fields}
    if isinstance(like, dict):
        cleared = {fields[f] for f in model if f in fields}     # given as empty: "" in the shop's field
        return {k: out.get(k, "" if k in cleared else v) for k, v in like.items()}
    return out


def parse_address(text: str) -> dict[str, Any] | None:
    """A one-line address ("18 Oak Lane, Apt 5, San Jose, CA 95112, USA", "北京市朝阳区建国路88号...") in the
    shop's fields, or null when the text is no address."""
    said = _address.find(text)
    return to_shop(said) if said else None


def address_line(address: Any, lang: str = "en") -> str:
    """A shop's address as one line, for a confirmation."""
    return _address.one_line(to_model(address), lang)
