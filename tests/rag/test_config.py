"""Each retrieval setting is declared once (rag.config.RetrievalConfig) and still read from the same
SWITCHBOARD_RAG_* variable, with the same bounds, into the same place of the settings tree."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from rag.config import CALIBRATION_FILE, SETTINGS, RagSettings, RetrievalConfig, load_calibration
from router.app.settings import Settings

# every variable by its name as deployments write it: (value in the environment, config field, value read)
ENV = {
    "SWITCHBOARD_RAG_CANDIDATES": ("37", "candidates", 37),
    "SWITCHBOARD_RAG_FUSION": ("rrf", "fusion", "rrf"),
    "SWITCHBOARD_RAG_BM25_WEIGHT": ("2.5", "bm25_weight", 2.5),
    "SWITCHBOARD_RAG_DENSE_WEIGHT": ("0.75", "dense_weight", 0.75),
    "SWITCHBOARD_RAG_RRF_K": ("11", "rrf_k", 11),
    "SWITCHBOARD_RAG_EF_SEARCH": ("333", "ef_search", 333),
    "SWITCHBOARD_RAG_CHUNK_CHARS": ("600", "chunk_chars", 600),
    "SWITCHBOARD_RAG_CHUNK_OVERLAP": ("12", "chunk_overlap", 12),
    "SWITCHBOARD_RAG_MAX_SHRINK": ("0.2", "max_shrink", 0.2),
    "SWITCHBOARD_RAG_ANSWER_THRESHOLD": ("0.31", "answer_threshold", 0.31),
    "SWITCHBOARD_RAG_CONFIDENCE_CENTER": ('{"en": 0.8, "zh": 0.9}', "confidence_center", {"en": 0.8, "zh": 0.9}),
    "SWITCHBOARD_RAG_CONFIDENCE_SLOPE": ("9.5", "confidence_slope", 9.5),
    "SWITCHBOARD_RAG_COVERAGE_WEIGHT": ("1.25", "coverage_weight", 1.25),
    "SWITCHBOARD_RAG_QUESTION_WEIGHT": ("4", "question_weight", 4.0),
    "SWITCHBOARD_RAG_MARGIN_WEIGHT": ("7", "margin_weight", 7.0),
    "SWITCHBOARD_RAG_UNKNOWN_WEIGHT": ("-2.5", "unknown_weight", -2.5),
}


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)                      # no .env file of the checkout
    for name in list(os.environ):
        if name.startswith("SWITCHBOARD_RAG_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_the_settings_are_the_configs_fields_under_their_old_names():
    # besides the retrieval config: the optional answer generator's and the answer lines' warm-up
    others = {f for f in RagSettings.model_fields if f.startswith("rag_generator_") or f == "rag_warm_answers"}
    assert {f"SWITCHBOARD_{f.upper()}" for f in RagSettings.model_fields if f not in others} == set(ENV)
    assert {f"SWITCHBOARD_RAG_{name.upper()}" for name in SETTINGS} == set(ENV)
    assert set(RagSettings.model_fields) <= set(Settings.model_fields)


@pytest.mark.parametrize("var", sorted(ENV))
def test_each_variable_sets_its_field_and_nothing_else(clean_env, var):
    raw, field, value = ENV[var]
    clean_env.setenv(var, raw)
    config = Settings().retrieval_config()
    assert getattr(config, field) == value
    default = RetrievalConfig()
    assert config.model_dump(exclude={field}) == default.model_dump(exclude={field})


def test_without_variables_the_settings_give_the_configs_defaults(clean_env):
    assert Settings().retrieval_config() == RetrievalConfig()
    assert RetrievalConfig().weights == (1.0, 3.0)


@pytest.mark.parametrize("var, raw", [("SWITCHBOARD_RAG_CANDIDATES", "0"), ("SWITCHBOARD_RAG_FUSION", "bogus"),
                                      ("SWITCHBOARD_RAG_MAX_SHRINK", "1.5"), ("SWITCHBOARD_RAG_CHUNK_CHARS", "10"),
                                      ("SWITCHBOARD_RAG_BM25_WEIGHT", "-1")])
def test_the_bounds_are_the_declarations(clean_env, var, raw):
    clean_env.setenv(var, raw)
    with pytest.raises(ValidationError):
        Settings()
    with pytest.raises(ValidationError):
        RetrievalConfig(**{ENV[var][1]: raw})


def test_the_fusion_weights_read_and_set_as_a_pair():
    config = RetrievalConfig()
    config.weights = (0.5, 2.0)
    assert (config.bm25_weight, config.dense_weight) == (0.5, 2.0) and config.weights == (0.5, 2.0)
    assert RetrievalConfig().weights == (1.0, 3.0)      # the default is not shared


def _calibration(folder, body: str):
    (folder / CALIBRATION_FILE).write_text(body, encoding="utf-8")
    return folder


def test_a_knowledge_bases_calibration_replaces_the_defaults_but_never_an_explicit_setting(clean_env, tmp_path):
    folder = _calibration(tmp_path, "encoder: multilingual-e5-small\nparameters:\n  answer_threshold: 0.42\n"
                                    "  unknown_weight: -3.5\n  confidence_center: {en: 0.8, zh: 0.81}\n")
    fitted = load_calibration(folder, "multilingual-e5-small")
    config = Settings().retrieval_config(fitted)
    assert (config.answer_threshold, config.unknown_weight, config.confidence_center) == (0.42, -3.5,
                                                                                           {"en": 0.8, "zh": 0.81})
    assert config.confidence_slope == RetrievalConfig().confidence_slope          # what it does not fit stays
    clean_env.setenv("SWITCHBOARD_RAG_ANSWER_THRESHOLD", "0.7")
    assert Settings().retrieval_config(fitted).answer_threshold == 0.7            # the deployer's word wins
    # fitted for another encoder: its scale is not this one's
    assert load_calibration(folder, "bge-small") == {}
    assert load_calibration(tmp_path / "nowhere", "multilingual-e5-small") == {}


@pytest.mark.parametrize("body, says", [
    ("encoder: multilingual-e5-small\nparameters:\n  answer_treshold: 0.4\n", "unknown ['answer_treshold']"),
    ("encoder: multilingual-e5-small\nparameters:\n  answer_threshold: 1.5\n", "answer_threshold"),
    ("- just a list\n", "expected a mapping"),
])
def test_a_broken_calibration_file_is_an_error_that_names_it(tmp_path, body, says):
    with pytest.raises(ValueError) as err:
        load_calibration(_calibration(tmp_path, body), "multilingual-e5-small")
    assert says in str(err.value)
