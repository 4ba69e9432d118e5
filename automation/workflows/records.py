"""References to records by what they are: a set of records, or one, picked from the customer's words.

The ``select`` step (``steps/select.py``) reads a description against the shop's own data and never
guesses: "all my pending T-shirts", "everything except the tablet", "the laptops I received" (several
orders), "the order with three items", "the order with the kettle and the lamp", "everything for the
kitchen", "my Boston address, the one on my other order". Every record offers the phrases that name it
(its ``match`` texts: item names, categories, cities, labels); a phrase counts only when the customer's words
state it (a whole word, its plural, the shop's vocabulary), so a description that names nothing a record has
picks nothing and is asked, and a shop noun the records lack ("the lamp order" when no order has a lamp) is
never taken as "the only one there is".

Variants are picked by what the customer wants of their options (:func:`variant_pick`): hard wants ("in
black"), soft wants ("polyester if possible", "black if there are several colours", scored), relative
targets over an option order the shop declares ("one size smaller", "大一号"), and the current options kept
where possible.

Pure functions over plain data; CEL gets :data:`FUNCTIONS` (``group_by``, ``distinct``, ``item_part``, ``refer``,
``mentioned``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

from automation.workflows import requests as R
from text.normalise import normalise

_CJK = re.compile(r"[\u4e00-\u9fff]")
_ALL = re.compile(r"(?<![a-z])(?:all|every|everything|both|each|whole)(?![a-z])|所有|全部|都|每个|每件|两个|两台|两件|俩", re.I)
_EXCEPT_EN = re.compile(r"(?<![a-z])(?:except(?: for)?|but not|other than|apart from|excluding|not the)(?![a-z])\s*(.*?)(?=[,;.!?]|$)",
                        re.I)
_EXCEPT_ZH = re.compile(r"(?:除了|除去|不包括)(.*?)(?=以外|之外|外|都|，|,|。|$)|([^，,。]*?)除外")
_PLURAL = re.compile(r"(?<![a-z])(?:items|things|ones|stuff|products|orders|articles)(?![a-z])", re.I)
_SEGMENTS = re.compile(r"\s*(?:(?<![a-z])(?:and|plus|as well as)(?![a-z])|&|,|;|、|，|；|和|跟|还有|以及)\s*", re.I)
_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5}
_COUNT_EN = re.compile(r"(?<![a-z])(one|two|three|four|five|\d+)\s+(?:items?|things?|products?|pieces?|articles?)(?![a-z])", re.I)
_COUNT_ZH = re.compile(r"([一两二三四五\d])\s*(?:件|样)(?:商品|东西)?")
_ORDINAL_EN = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5}
_PICKS = re.compile(r"第\s*([一二两三四五六七八九\d]+)|(?<![a-z0-9])(\d{1,2}|first|second|third|fourth|fifth|last)(?![a-z0-9])", re.I)
_NONE = re.compile(r"(?<![a-z])(?:none|neither|no one)(?![a-z])|都不是|都不要|一个都不", re.I)
_ID = re.compile(r"(?<![A-Za-z0-9])[A-Z]{1,4}-?\d{3,10}(?:-\d+)?(?![A-Za-z0-9])")

# soft wants: "if possible", "preferably", "black if there are several colours", "最好", "尽量", "如果有的话"
_SOFT = re.compile(r"(?<![a-z])(?:if possible|if you can|preferably|ideally|if available|if you have|if there (?:is|are)|"
                   r"would be nice|rather|prefer)(?![a-z])|最好|尽量|如果有|如果可以|可以的话|有的话|优先", re.I)
_CLAUSES = re.compile(r"[,;，；。]|(?<![a-z])(?:but|and)(?![a-z])", re.I)
# relative targets: "one size smaller", "a size up", "two sizes bigger", "小一号", "大两码"
_REL_EN = re.compile(r"(?<![a-z])(?:(a|one|two|three|\d)\s+)?(\w+?)s?\s+(smaller|bigger|larger|up|down|less|more)(?![a-z])"
                     r"|(?<![a-z])(smaller|bigger|larger)\s+(\w+)(?![a-z])", re.I)
_REL_ZH = re.compile(r"(小|大)\s*([一两二三\d]?)\s*(\S)")
_UP = {"bigger", "larger", "up", "more", "大"}
# scores of a variant: each soft want of the customer, each current option kept, each `prefer:` of the shop
SOFT_WEIGHT, KEEP_WEIGHT, PREFER_WEIGHT = 10.0, 1.0, 0.5


def norm(text: str) -> str:
    return normalise(text or "", case="lower", simplify="never", spaces="keep").strip()


def said(phrase: str, text: str) -> bool:
    """The phrase is stated in the (normalised) text: a whole word or its plural for Latin, a substring for CJK."""
    p = norm(phrase)
    if not p or (len(p) < 2 and not _CJK.search(p)):
        return False
    if _CJK.search(p):
        return p in text
    return re.search(rf"(?<![a-z0-9]){re.escape(p)}(?:s|es)?(?![a-z0-9])", text) is not None


def _plural(phrase: str, text: str) -> bool:
    p = norm(phrase)
    return bool(p) and not _CJK.search(p) and re.search(rf"(?<![a-z0-9]){re.escape(p)}(?:s|es)(?![a-z0-9])", text) is not None


@dataclass
class Pick:
    """What the words picked: ``chosen`` (indices), or ``candidates`` to ask among; ``how`` says why."""

    chosen: list[int] = field(default_factory=list)
    candidates: list[int] = field(default_factory=list)
    how: str = "none"          # id | named | all | traits | ambiguous | absent | none
    named: bool = False        # the words stated something about the records


def _split_except(text: str) -> tuple[str, str]:
    neg = []
    for rx in (_EXCEPT_EN, _EXCEPT_ZH):
        for m in rx.finditer(text):
            neg.append(next(g for g in m.groups() if g is not None) if any(m.groups()) else "")
        text = rx.sub(" ", text)
    return text, " ".join(neg)


def _count(text: str) -> int | None:
    m = _COUNT_EN.search(text) or _COUNT_ZH.search(text)
    if not m:
        return None
    raw = m.group(1).lower()
    return int(raw) if raw.isdigit() else _NUMBERS.get(raw)


def _hits(phrases: list[str], text: str) -> set[str]:
    """The record's phrases the text states, without a phrase inside a longer stated one ("kettle" in
    "electric kettle")."""
    found = {norm(p) for p in phrases if said(p, text)}
    return {p for p in found if not any(p != q and p in q for q in found)}


def resolve(text: str, ids: list[str], texts: list[list[str]], *, counts: list[int] | None = None,
            nouns: tuple[str, ...] | list[str] = (), one: bool = False, among: list[int] | None = None, by_id: bool = True) -> Pick:
    """The records a description picks (see the module's docstring). ``ids``: each record's id; ``texts``:
    the phrases that name it; ``counts``: how many things it holds ("the order with three items");
    ``nouns``: the shop's words for things (a noun stated that no record has makes the words name something
    absent: asked, never the only record); ``among``: the records in question (default all); ``by_id``: the
    records have ids the words may state (an order number), else id-like words are about something else."""
    pool = list(among if among is not None else range(len(ids)))
    t = norm(text)
    pos, neg = _split_except(t)
    named = False
    tokens = [tok.lower() for tok in _ID.findall(text or "")] if by_id else []
    if tokens:
        with_id = [i for i in pool if any(tok == ids[i].lower() or tok in {norm(x) for x in texts[i]} for tok in tokens)]
        if not with_id:
            return Pick([], pool, "absent", True)
        pool, named = with_id, True
        for tok in tokens:
            pos = re.sub(rf"(?<![a-z0-9]){re.escape(tok)}(?![a-z0-9])", " ", pos)
    n = _count(pos)
    by_count = n is not None and counts is not None
    if n is not None and counts is not None:
        pool = [i for i in pool if counts[i] == n]
        named = True
        if not pool:
            return Pick([], list(among if among is not None else range(len(ids))), "absent", True)
    # a shop noun none of the records has ("the order with the kettle and the laptop" when no order has a
    # laptop) names something absent: asked, never the records the other words fit
    if any(said(w, pos) and not any(norm(w) in norm(x) for i in pool for x in texts[i]) for w in nouns):
        return Pick([], pool, "absent", True)
    quantified = bool(_ALL.search(_COUNT_ZH.sub(" ", _COUNT_EN.sub(" ", pos))) or _PLURAL.search(_COUNT_EN.sub(" ", pos)))
    segments = [s for s in _SEGMENTS.split(pos) if s.strip()]
    per_seg: list[tuple[list[int], bool]] = []
    for seg in segments:
        scored = [(len(_hits(texts[i], seg)), i) for i in pool]
        top = max((s for s, _ in scored), default=0)
        if top:
            plural = any(_plural(p, seg) for i in pool for p in texts[i])
            per_seg.append(([i for s, i in scored if s == top], plural))
    if per_seg:
        named = True
        sets = [set(s) for s, _ in per_seg]
        inter = set.intersection(*sets)
        if len(per_seg) >= 2 and inter:
            chosen = sorted(inter)
            ambiguous = len(chosen) > 1 and not quantified
        else:
            chosen = sorted(set().union(*sets))
            ambiguous = not quantified and any(len(s) > 1 and not plural for s, plural in per_seg)
    else:
        chosen = list(pool)
        ambiguous = by_count and not quantified and len(chosen) > 1   # "the order with two items": which?
    if neg.strip():
        named = True
        drop = {i for i in chosen if _hits(texts[i], neg)}
        chosen = [i for i in chosen if i not in drop]
    if not chosen:
        return Pick([], pool, "absent", named)
    if not named and not quantified:
        return Pick([], chosen, "none", False)
    if ambiguous or (one and len(chosen) > 1):
        return Pick([], chosen, "ambiguous", True)
    return Pick(chosen, [], "id" if tokens and not per_seg else ("all" if quantified and not per_seg else "named"), True)


def picked_numbers(text: str, shown: int) -> list[int] | None:
    """Positions named in an answer to a numbered list ("1 and 3", "第一个和第三个", "the second"), 0-based;
    None when the answer names none, [] when it names positions outside the list."""
    out: list[int] = []
    for m in _PICKS.finditer(text or ""):
        raw = (m.group(1) or m.group(2) or "").lower()
        k = -1 if raw == "last" else int(raw) if raw.isdigit() else _ORDINAL_EN.get(raw, _NUMBERS.get(raw, 0))
        if k == -1:
            k = shown
        if not 1 <= k <= shown:
            return []
        out.append(k - 1)
    return sorted(set(out)) if out else None


def says_all(text: str) -> bool:
    return bool(_ALL.search(norm(text)))


def says_none(text: str) -> bool:
    return bool(_NONE.search(norm(text)))


# -- variants: hard and soft wants, relative targets, the rest kept where possible ---------------------------

@dataclass
class Wants:
    hard: dict[str, str] = field(default_factory=dict)
    soft: dict[str, str] = field(default_factory=dict)
    shift: dict[str, int] = field(default_factory=dict)      # axis -> steps along the shop's order

    @property
    def any(self) -> bool:
        return bool(self.hard or self.soft or self.shift)


def _axis_words(axis: str, spec: Any) -> tuple[list[str], list[str]]:
    """(the axis's values in order, the words that name the axis) from ``order: {axis: [..] | {values, words}}``."""
    if isinstance(spec, dict):
        return [str(v) for v in spec.get("values") or []], [str(w) for w in spec.get("words") or []] + [axis]
    return [str(v) for v in spec or []], [axis]


def wants(text: str, axes: dict[str, list[str]], current: dict[str, Any], order: dict[str, Any],
          vocabulary: dict[str, dict[str, list[str]]]) -> Wants:
    """What the words want of each option axis. A value stated in a clause with a soft marker is a soft want;
    the current value stated beside another of the same axis describes the item, not the want."""
    t = norm(text)
    w = Wants()
    clauses = [c for c in _CLAUSES.split(t) if c and c.strip()]
    for axis, values in axes.items():
        named: dict[str, bool] = {}
        for value in values:
            words = [value] + list((vocabulary.get(axis) or {}).get(value) or [])
            for clause in clauses:
                if any(_said_value(word, clause) for word in words):
                    named[value] = named.get(value, False) or bool(_SOFT.search(clause))
        if len(named) > 1:
            named.pop(str(current.get(axis)), None)
        for value, soft in named.items():
            (w.soft if soft else w.hard).setdefault(axis, value)
    for axis, spec in order.items():
        values, units = _axis_words(axis, spec)
        n = _shift(t, units)
        if n:
            w.shift[axis] = n
            w.hard.pop(axis, None)
            w.soft.pop(axis, None)
    return w


def _said_value(word: str, text: str) -> bool:
    p = norm(word)
    if not p:
        return False
    if _CJK.search(p):
        return p in text
    # a one-letter value ("S", "M") only as a word of its own after "size" or alone: "M", "size M", "in M"
    if len(p) == 1:
        return re.search(rf"(?:^|size\s+|in\s+|an?\s+){re.escape(p)}(?![a-z0-9])", text) is not None and \
            re.search(rf"(?<![a-z0-9']){re.escape(p)}(?![a-z0-9'])", text) is not None
    return re.search(rf"(?<![a-z0-9]){re.escape(p)}(?:s|es)?(?![a-z0-9])", text) is not None


def _shift(text: str, units: list[str]) -> int:
    unit_words = {norm(u) for u in units}
    for m in _REL_EN.finditer(text):
        if m.group(3):
            n_raw, unit, direction = m.group(1), m.group(2), m.group(3)
        else:
            n_raw, unit, direction = None, m.group(5), m.group(4)
        if norm(unit).rstrip("s") not in {u.rstrip("s") for u in unit_words}:
            continue
        n = 1 if not n_raw or n_raw in ("a", "one") else _NUMBERS.get(n_raw, int(n_raw) if n_raw.isdigit() else 1)
        return n if direction.lower() in _UP else -n
    for m in _REL_ZH.finditer(text):
        if m.group(3) in unit_words:
            n = _NUMBERS.get(m.group(2), int(m.group(2)) if m.group(2).isdigit() else 1) if m.group(2) else 1
            return n if m.group(1) in _UP else -n
    return 0


# "the same colour as my other earbuds", "just like the one in H2102", "和另一副一样的", "颜色跟H2102那台一样"
_LIKE_EN = re.compile(r"(?<![a-z])(?:the\s+)?same\s+(?:(\w+)\s+)?(?:as|like)\s+(.+?)(?=[,;.!?]|$)"
                      r"|(?<![a-z'])(?!(?:i|d|we|you|they|would|should|could|really|also|do|dont|don't|might|may|will)\s)"
                      r"[a-z]+\s+like\s+(?:the|my|those|that|this)\s+(.+?)(?=[,;.!?]|$)"
                      r"|(?<![a-z])match(?:es|ing)?\s+(?:the|my)\s+(.+?)(?=[,;.!?]|$)", re.I)
_LIKE_ZH = re.compile(r"(?:(颜色|尺码|尺寸|大小|码|材质|材料|容量|内存|款式|型号)\s*)?(?:和|跟|同|与|像)(.+?)(?:一模一样|一样|相同|同款)"
                      r"(?:的)?(颜色|尺码|尺寸|大小|码|材质|材料|容量|内存|款式|型号)?")
# words naming an option axis in a relative reference; other words ("kind", "model", "款式") mean every axis
_AXIS_WORDS = {"颜色": "colour color", "尺码": "size", "尺寸": "size", "大小": "size", "码": "size", "材质": "material",
               "材料": "material", "容量": "storage capacity", "内存": "storage memory"}


def like_target(text: str, records: list[dict[str, Any]], axes: list[str], order: dict[str, Any]) -> tuple[dict[str, str] | None, str, str]:
    """A relative target over another record ("the same colour as my other earbuds", "跟H2102那台一样的"):
    (the options it fixes, or None when the words refer to nothing decidable; the reference's text; the words
    without it). ``records`` are the other records, each ``{names: [phrases], options: {axis: value}}``.
    Returns ({}, "", text) when the words make no such reference."""
    t = norm(text)
    m = _LIKE_EN.search(t)
    zh = None if m else _LIKE_ZH.search(t)
    if not m and not zh:
        return {}, "", text
    if m:
        axis_word = m.group(1) or ""
        ref = next(g for g in (m.group(2), m.group(3), m.group(4)) if g)
        span = m.span()
    else:
        assert zh is not None
        axis_word, ref, span = _AXIS_WORDS.get(zh.group(1) or zh.group(3) or "", ""), zh.group(2), zh.span()
    rest = (t[:span[0]] + " " + t[span[1]:]).strip()
    wanted = [a for a in axes if axis_word and any(
        _close(w, a) or any(_close(w, u) for u in _axis_words(a, order.get(a))[1]) for w in axis_word.split())]
    names = [[str(x) for x in (r.get("names") or []) if x is not None] for r in records]
    pick = resolve(ref, [str(n) for n in range(len(records))], names, by_id=False)
    chosen = pick.chosen or (pick.candidates if pick.how == "ambiguous" else [])
    same_kind = [i for i, r in enumerate(records) if set(r.get("options") or {}) == set(axes)]
    if not pick.named:   # "the other one", "另一副": a record of the same kind (the same option axes)
        chosen = same_kind
    elif len(chosen) > 1 and set(chosen) & set(same_kind):   # "the ones I received": those of this kind
        chosen = [i for i in chosen if i in same_kind]
    if not chosen:
        return None, ref, rest
    fixed: dict[str, str] = {}
    for axis in (wanted or axes):
        values = {str((records[i].get("options") or {}).get(axis)) for i in chosen if axis in (records[i].get("options") or {})}
        if len(values) > 1:
            return None, ref, rest   # "the other laptop" of two different ones: which is meant is asked
        if values:
            fixed[axis] = values.pop()
    return fixed, ref, rest


def _close(a: str, b: str) -> bool:
    a, b = norm(a), norm(b)
    return a == b or (len(a) >= 4 and len(b) >= 4 and SequenceMatcher(None, a, b).ratio() >= 0.8)


def variant_pick(text: str, traits: list[dict[str, Any]], current: dict[str, Any], order: dict[str, Any],
                 vocabulary: dict[str, dict[str, list[str]]], bonus: list[float] | None = None,
                 like: list[dict[str, Any]] | None = None) -> tuple[Pick, Wants]:
    """The variant(s) the words want among ``traits`` (each variant's options): hard wants and the relative
    target must hold; then soft wants (10 each), each current option kept (1 each) and the shop's ``prefer``
    bonus (0.5 per true: a tie-breaker) score; the best is taken when it is the only best, else the best are
    asked among. ``like``: other records a relative target may name ("the same colour as my other earbuds"):
    the options of the one named are hard wants."""
    axes: dict[str, list[str]] = {}
    for tr in traits:
        for k, v in tr.items():
            if str(v) not in axes.setdefault(k, []):
                axes[k].append(str(v))
    fixed: dict[str, str] = {}
    if like is not None:
        found, _, text = like_target(text, like, list(axes), order)
        if found is None:
            return Pick([], list(range(len(traits))), "ambiguous", True), Wants()
        fixed = found
    w = wants(text, axes, current, order, vocabulary)
    for axis, value in fixed.items():
        w.hard[axis] = value
        w.soft.pop(axis, None)
        w.shift.pop(axis, None)
    # a value the shop has words for but this product lacks ("the jacket in red"): wanted, so nothing fits
    lacking = {axis: [str(v) for v in (vocabulary.get(axis) or {}) if str(v) not in values]
               for axis, values in axes.items()}
    if any(lacking.values()):
        wider = wants(text, {axis: axes[axis] + lacking[axis] for axis in axes}, current, order, vocabulary)
        if any(v in lacking[axis] and v != str(current.get(axis)) for axis, v in wider.hard.items()):
            return Pick([], [], "absent", True), w
    targets: dict[str, str] = dict(w.hard)
    for axis, n in w.shift.items():
        values, _ = _axis_words(axis, order[axis])
        cur = str(current.get(axis))
        if cur not in values or not 0 <= values.index(cur) + n < len(values):
            return Pick([], [], "absent", True), w
        targets[axis] = values[values.index(cur) + n]
    if targets and not w.soft and all(str(current.get(k)) == v for k, v in targets.items()):
        return Pick([], [], "absent", True), w     # "the 512GB one" of a 512GB item: nothing to change, no guess
    pool = [i for i, tr in enumerate(traits) if all(str(tr.get(k)) == v for k, v in targets.items())]
    if not pool:
        return Pick([], [], "absent", w.any), w
    if not w.any:
        return Pick([], pool, "none", False), w

    def score(i: int) -> float:
        tr = traits[i]
        s = sum(SOFT_WEIGHT for k, v in w.soft.items() if str(tr.get(k)) == v)
        s += (bonus[i] if bonus else 0.0)
        return s + sum(KEEP_WEIGHT for k, v in current.items() if k not in targets and str(tr.get(k)) == str(v))

    best = max(score(i) for i in pool)
    top = [i for i in pool if score(i) == best]
    if len(top) == 1:
        return Pick(top, [], "traits", True), w
    return Pick([], top, "ambiguous", True), w


# -- CEL helpers ----------------------------------------------------------------------------------------------

def group_by(items: Any, key: Any) -> list[dict[str, Any]]:
    """``group_by(items, 'order_id')``: ``[{key, items}]`` in first-seen order (one write per order)."""
    groups: dict[Any, list[Any]] = {}
    for it in list(items or []):
        groups.setdefault(it.get(str(key)) if isinstance(it, dict) else it, []).append(it)
    return [{"key": k, "items": v} for k, v in groups.items()]


def distinct(items: Any) -> list[Any]:
    """``distinct(list)``: the list without repeats, in order."""
    out: list[Any] = []
    for it in list(items or []):
        if it not in out:
            out.append(it)
    return out


_CLAUSE_CUT = re.compile(r"[,;，；。]")
_OF_ITEM = re.compile(r"(?<![a-z])(?:version|variant|model|edition)\s+of\s+|(?:版本|版|款)的", re.I)
_CHANGE_EN = re.compile(r"\s(?:for|to|into|instead of)\s|\sin\s(?!(?:order\s+)?[a-z]{1,4}-?\d|my\s|the\s|your\s|our\s)", re.I)
_CHANGE_ZH = re.compile(r"换成|改成|换为|改为|变成|换个|换一个|换|改")


def item_part(text: Any) -> str:
    """``item_part(text)``: the words about the item, before the wanted change: "the black T-shirt" of
    "change the black T-shirt to white" or "I'd like the black T-shirt in white", "水壶" of "水壶换成红色的",
    "make the T-shirt" of "make the T-shirt black" (an option word of the vocabulary after the item's noun);
    the whole text when it states no change."""
    raw = str(text or "")
    clauses = [c for c in _CLAUSE_CUT.split(raw) if c.strip()]
    wants = [c for c in clauses if R.wants_only(c) and not _EXCEPT_EN.search(c) and not _EXCEPT_ZH.search(c)]
    if wants and len(wants) < len(clauses):
        # "我要换黑色的，订单H2003里的耳机", "想要大号的，把外套换一下": a clause that only states the want is no
        # part of the item, wherever it stands
        raw = "，".join(c.strip() for c in clauses if c not in wants)
    of = _OF_ITEM.search(raw)
    if of:   # "the 512GB version of my laptop", "512G版本的笔记本": the want first, the item after it
        raw = raw[of.end():] if raw[of.end():].strip(" 。.!！?？") else raw[:of.start()]
    vocab = R.VOCABULARY.get()
    t = norm(raw)
    if len(t) != len(raw):      # positions of the folded text are the text's own only when it kept its length
        return raw
    nouns = [w for value, ws in (vocab.get("title") or {}).items() for w in [value, *ws]]
    ends = [m.end() for w in nouns for m in [_said_at(w, t)] if m]
    after = min(ends) if ends else 0          # the change comes after the item ("I want to exchange my jacket")
    cuts = [m.start() for rx in (_CHANGE_EN, _CHANGE_ZH) for m in [rx.search(raw, after)] if m and m.start() > 0]
    if cuts:
        return raw[:min(cuts)].strip()
    if not ends:
        return raw
    values = [w for group, entries in vocab.items() if group != "title" for value, ws in entries.items()
              for w in [value, *ws]]
    starts = [m.start() for w in values for m in [_said_at(w, t, after)] if m]
    return raw[:min(starts)].strip() if starts else raw


def _said_at(word: str, text: str, start: int = 0) -> re.Match[str] | None:
    p = norm(word)
    if not p or (len(p) < 2 and not _CJK.search(p)):
        return None
    rx = re.escape(p) if _CJK.search(p) else rf"(?<![a-z0-9]){re.escape(p)}(?:s|es)?(?![a-z0-9])"
    return re.compile(rx).search(text, start)


def _refer(text: Any, rows: Any) -> Pick:
    phrases = [[str(x) for x in (r if isinstance(r, list) else [r]) if x is not None] for r in list(rows or [])]
    return resolve(str(text or ""), [str(n) for n in range(len(phrases))], phrases, by_id=False)


def refer(text: Any, rows: Any) -> list[int]:
    """``refer(text, rows)``: the records a description picks, given as their phrases (one list per record),
    for steps other than ``select`` (a ``choose``'s options narrowed, a ``set``): their indices, empty unless
    the words decide ("the order with the kettle and the lamp")."""
    return _refer(text, rows).chosen


def mentioned(text: Any, rows: Any) -> list[int]:
    """``mentioned(text, rows)``: the records the words could mean (those decided, else those still in
    question); empty when they name none."""
    p = _refer(text, rows)
    return p.chosen or (p.candidates if p.how == "ambiguous" else [])


FUNCTIONS = {"group_by": group_by, "distinct": distinct, "item_part": item_part, "refer": refer, "mentioned": mentioned}
