"""The query vectors of the questions being answered, remembered by text in this process.

One answer needs the customer's question as a vector three times (retrieval, the entry score, the confidence's
question signal) and a two-part question's parts again; each is one encoder call (10-40 ms on a small CPU).
Kept in memory only and LRU-bounded: a customer's words never go to the embedding cache table, which holds
the articles' text.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np


class QueryVectors:
    def __init__(self, encoder: Any, size: int = 512):
        self.encoder = encoder
        self.size = size
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, text: str) -> np.ndarray:
        """The encoder's query vector of ``text`` (encoded on first use)."""
        with self._lock:
            vec = self._vectors.get(text)
            if vec is not None:
                self._vectors.move_to_end(text)
                return vec
        vec = np.asarray(self.encoder.encode_queries([text])[0], dtype=np.float32)
        with self._lock:
            self._vectors[text] = vec
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)
        return vec
