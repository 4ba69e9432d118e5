"""Choosing an option by meaning: the gateway's sentence encoder as ``similarity`` for ``understand.choose``.

A multilingual encoder such as multilingual-e5-small gives every pair of short texts a high cosine (unrelated
ones ~0.75-0.90, a cross-language match often no higher), so a raw cosine says little. Each option's cosine is
judged against a background instead, in standard deviations, from both sides:

- the text's side: the text against other things one buys, written in the option's script ("the pan" against
  不粘锅 and against 电水壶, 羊毛围巾, ...): does this option stand out among things of its language?
- the option's side: the option against other customers' references in the text's script (不粘锅 against
  "the pan" and against "the kettle", "the scarf", ...): does this text stand out among answers like it?

An option's score is the lesser of the two (both must hold): a generic answer ("my sister bought it") is close to
every option and stands out on neither side. ``choose`` takes the best option when its score reaches
``confident[0]`` and leads the runner-up by ``confident[1]`` (tests/automation/test_choice_by_meaning.py measures
the rule on cross-language references and on answers that name nothing).
"""

from __future__ import annotations

import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

# Things a shop sells, as an order lists them, in English and in Chinese: the background an option is judged
# against. Kept generic (no shop's catalogue): an option that is one of them stands out less and is asked.
ITEMS_EN = ("Wireless mouse", "Mechanical keyboard", "Wool scarf", "Electric kettle", "Running shoes",
            "Smartphone 256GB", "Rice 5kg", "Canvas tote bag", "Backpack", "Sunglasses", "Water bottle",
            "Yoga mat", "Desk chair", "Umbrella", "Wristwatch", "Phone case", "Notebook", "Pillow", "Blender",
            "T-shirt", "Jeans", "Dress", "Winter jacket", "Socks", "Laptop", "Tablet", "Camera", "Bed sheets",
            "Toothbrush", "Shampoo")
ITEMS_ZH = ("无线鼠标", "机械键盘", "羊毛围巾", "电水壶", "跑步鞋", "智能手机", "东北大米", "帆布包", "双肩包", "太阳镜",
            "水杯", "瑜伽垫", "办公椅", "雨伞", "手表", "手机壳", "笔记本", "枕头", "搅拌机", "T恤", "牛仔裤", "连衣裙",
            "羽绒服", "袜子", "平板电脑", "相机", "床单", "牙刷", "洗发水", "台式电脑")
# customers' references to such things, in each script: the background a text is judged against
REFERENCES_EN = tuple(f"the {w.lower()}" for w in ITEMS_EN)
REFERENCES_ZH = tuple(f"那个{w}" for w in ITEMS_ZH)

#: (the least score, the least lead over the runner-up) of a pick, in standard deviations of the background
CONFIDENT = (2.25, 1.0)

_HAN = re.compile(r"[\u4e00-\u9fff]")
_LATIN = re.compile(r"[A-Za-z]")


def script(text: str) -> str:
    """"zh" when Han characters carry the text (one weighs like three letters), else "en"."""
    return "zh" if 3 * len(_HAN.findall(text)) >= len(_LATIN.findall(text)) and _HAN.search(text) else "en"


class EncoderSimilarity:
    """``similarity(text, options) -> scores`` over an encoder's ``encode_queries`` (L2-normalised vectors),
    each score the option's standing against the background (see the module's docstring); ``confident`` is
    the rule ``choose`` applies to these scores. The background is encoded once; options' vectors are kept
    (a bounded cache: the same list is read at each turn of a choice)."""

    def __init__(self, encoder: Any, *, confident: tuple[float, float] = CONFIDENT, cache_size: int = 4096):
        self.encoder = encoder
        self.confident = confident
        self.cache_size = cache_size
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._background: dict[str, tuple[np.ndarray, np.ndarray]] | None = None

    def background(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per script: (the items' vectors, the references' vectors); encoded at the first use, once per encoder
        (a reload of the workflows, or services built again in one process, find it encoded)."""
        if self._background is None:
            try:
                self._background = _BACKGROUNDS.get(self.encoder)
            except TypeError:       # an encoder that cannot be weakly referenced: encoded for this instance
                pass
        if self._background is None:
            texts = [*ITEMS_EN, *ITEMS_ZH, *REFERENCES_EN, *REFERENCES_ZH]
            v = np.asarray(self.encoder.encode_queries(texts), dtype=np.float32)
            a, b, c = len(ITEMS_EN), len(ITEMS_EN) + len(ITEMS_ZH), len(ITEMS_EN) + len(ITEMS_ZH) + len(REFERENCES_EN)
            self._background = {"en": (v[:a], v[b:c]), "zh": (v[a:b], v[c:])}
            try:
                _BACKGROUNDS[self.encoder] = self._background
            except TypeError:
                pass
        return self._background

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            found = {t: self._vectors[t] for t in texts if t in self._vectors}
            for t in found:
                self._vectors.move_to_end(t)
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            fresh = np.asarray(self.encoder.encode_queries(missing), dtype=np.float32)
            found.update(zip(missing, fresh))
            with self._lock:
                self._vectors.update(zip(missing, fresh))
                while len(self._vectors) > self.cache_size:
                    self._vectors.popitem(last=False)
        stacked: np.ndarray = np.stack([found[t] for t in texts])
        return stacked

    def __call__(self, text: str, options: list[str]) -> list[float]:
        if not options:
            return []
        background = self.background()
        t = np.asarray(self.encoder.encode_queries([text]), dtype=np.float32)[0]
        refs = background[script(text)][1]
        opts = self._encode(options)
        scores = []
        for option, o in zip(options, opts):
            cosine = float(o @ t)
            items = background[script(option)][0] @ t     # the text against other things of the option's script
            others = refs @ o                              # the option against other references of the text's script
            scores.append(min(_standing(cosine, items), _standing(cosine, others)))
        return scores


#: the background's vectors per encoder object (the texts are fixed: one encoding serves every instance)
_BACKGROUNDS: weakref.WeakKeyDictionary[Any, dict[str, tuple[np.ndarray, np.ndarray]]] = weakref.WeakKeyDictionary()


def _standing(value: float, background: np.ndarray) -> float:
    """How many standard deviations ``value`` lies above the background's mean."""
    return float((value - background.mean()) / max(float(background.std()), 1e-6))
