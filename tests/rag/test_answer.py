"""Grounded answers: bilingual retrieval on the bundled KB, extractive text, citations, the no-answer path,
and the optional generator whose unsupported sentences are never sent."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import psycopg
import pytest

from rag.answer import OpenAIChatGenerator, extract, unsupported_sentences
from rag.chunk import split_sentences
from rag.lexical.tantivy import TantivyIndex
from rag.rewrite import get_tokenizer, load_glossary
from rag.service import SAMPLE_KB, KnowledgeBase, RetrievalConfig, _stem
from rag.types import Chunk, Hit

ROUTER_KITS = str(Path(__file__).resolve().parents[1] / "router")   # routing_kit: the shared knowledge base template
USES_WHOLE_PACK = True   # tests/conftest.py: the run computes the whole pack's vectors ahead
TOPICS = ("refund-timelines", "password-reset", "order-tracking", "installments-huabei", "invoice-special-vat",
          "coupons")


def _subset(folder: Path) -> Path:
    folder.mkdir()
    for t in TOPICS:
        for lang in ("en", "zh"):
            shutil.copy(SAMPLE_KB / f"{t}-{lang}.md", folder)
    shutil.copy(SAMPLE_KB / "glossary.yaml", folder)
    return folder


def _own_database(template_dsn, template: str = "switchboard_template"):
    """A migrated database of its own (a copy of ``template``): a pool on it, dropped afterwards."""
    from router.db import open_pool

    base, _, query = template_dsn.partition("?")
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = base.rsplit("/", 1)[0] + "/postgres" + (f"?{query}" if query else "")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    pool = open_pool(base.rsplit("/", 1)[0] + f"/{name}" + (f"?{query}" if query else ""), min_size=1, max_size=4)
    yield pool
    pool.close()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def module_pool(pg_server, template_dsn):
    """A migrated database for this module (the e5 index is built once and shared by its tests)."""
    yield from _own_database(template_dsn)


@pytest.fixture(scope="module")
def bundled_template(pg_server, template_dsn, e5_encoder):
    """The whole bundled pack indexed and warmed once per run, in a template database shared with the routing
    tests (tests/router/routing_kit.py kb_template)."""
    if ROUTER_KITS not in sys.path:
        sys.path.insert(0, ROUTER_KITS)
    from routing_kit import kb_template

    _, uri = pg_server
    return kb_template(uri, psycopg.conninfo.conninfo_to_dict(template_dsn)["dbname"], e5_encoder, None)


@pytest.fixture(scope="module")
def bundled_pool(pg_server, template_dsn, bundled_template):
    """A copy of that template for this module (the active generation is per database)."""
    yield from _own_database(template_dsn, bundled_template[0])


@pytest.fixture(scope="module")
def e5_kb(module_pool, e5_encoder, tmp_path_factory, pg_server):
    if ROUTER_KITS not in sys.path:
        sys.path.insert(0, ROUTER_KITS)
    from routing_kit import add_known_vectors

    add_known_vectors(pg_server[1], module_pool.conninfo)     # the embedding cache: vectors the run computed before
    src = _subset(tmp_path_factory.mktemp("kb") / "kb")
    glossary = load_glossary(src)
    lexical = TantivyIndex(tmp_path_factory.mktemp("index"), tokenizer=get_tokenizer(glossary.words()))
    kb = KnowledgeBase(module_pool, e5_encoder, lexical, glossary=glossary, sample_dir=src)
    kb.load_sample_if_empty()
    return kb


@pytest.mark.slow
@pytest.mark.parametrize("query, doc", [
    ("退款到支付宝要多久？", "refund-timelines-zh"),
    ("忘记密码了怎么找回", "password-reset-zh"),
    ("在哪里能查到快递到哪了", "order-tracking-zh"),
    ("How many days until a refund reaches my Alipay?", "refund-timelines-en"),
    ("I can't remember my password", "password-reset-en"),
    ("Can I pay for an order in installments?", "installments-huabei-en"),
])
def test_a_question_finds_the_article_in_its_own_language(e5_kb, query, doc):
    hits = e5_kb.search(query, 5, mode="hybrid")
    assert hits[0].chunk.doc_id == doc
    answer = e5_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == doc
    cited = answer.passages[0].chunk
    articles = e5_kb.articles(e5_kb.active_generation(), [c["doc_id"] for c in answer.citations])
    source = "\n".join(ch.text for chunks in articles.values() for ch in chunks)
    # extractive: every sentence of the answer is a sentence of a cited article (a list item closed as a sentence),
    # or an FAQ entry's yes / no said as the statement its question asks about, in the article's words
    said = {"you", "your", "we", "can", "cannot", "do", "not", "will", "there", "is", "are", "no", "不"}
    words = set(e5_kb.composer.words_in(source)) | said
    assert all(s.rstrip("。.；;") in source or set(e5_kb.composer.words_in(s)) <= words
               for s in split_sentences(answer.text)), answer.text
    c = answer.citations[0]
    assert (c["title"], c["section"], c["source"]) == (cited.title, cited.section, cited.source)
    assert 0.5 <= answer.confidence <= 1.0 and answer.timings["total"] > 0


@pytest.fixture(scope="module")
def bundled_kb(bundled_pool, bundled_template, e5_encoder):
    """The whole bundled pack as `make run` serves it (its glossary, its calibration, tantivy, pgvector and e5)."""
    from routing_kit import template_knowledge_base

    kb = template_knowledge_base(bundled_pool, bundled_template, e5_encoder)
    assert kb.sample_dir.name == "kb" and {p.name for p in kb.sample_dir.glob("*.md")} == {
        p.name for p in SAMPLE_KB.glob("*.md")}          # every article of the pack
    return kb


@pytest.mark.slow
@pytest.mark.parametrize("query, doc, says, not_says", [
    ("How long does a refund take to reach my card?", "refund-timelines-en", "3–7 business days", "Alipay"),
    ("How long does a refund to Alipay take?", "refund-timelines-en", "1–3 business days", "3–7"),
    ("退款到银行卡要多久？", "refund-timelines-zh", "3–7个工作日", "支付宝"),
    ("退款到支付宝要多久？", "refund-timelines-zh", "1–3个工作日", "3–7"),
    # an FAQ reply says the answer in a sentence, not the entry's question
    ("Can I pay with PayPal?", "payment-methods-en", "You can pay with PayPal if", "Can I pay with PayPal?"),
    ("能用PayPal付款吗", "payment-methods-zh", "能用PayPal付款，", "能用PayPal付款吗"),
    # a contraction is no word the answer lacks
    ("I didn't get the verification code", "password-reset-en", "spam", "Q:"),
    ("what's your phone number?", "contact-hours-en", "400-000-6688", "Q:"),
    ("你们的电话多少", "contact-hours-zh", "400-000-6688", "问："),
    # the glossary's variant said whole ("discount code", "promo code" are "coupon"): its words are the coupons
    # article's (a code that does not work: what to check)
    ("my discount code isn't working", "coupons-en", "minimum spend", "verification"),
    ("my promo code doesn't work", "coupons-en", "minimum spend", "verification"),
    # an entry about reissuing ("重开发票" holds "发票") answers less than whether an invoice can be had
    ("可以开发票吗", "invoice-electronic-zh", "补开发票", "换开"),
])
def test_a_bundled_question_gets_its_entry_in_its_own_words(bundled_kb, query, doc, says, not_says):
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == doc, (answer.reason, answer.signals,
                                                                      answer.citations[:1])
    assert says in answer.text and not_says not in answer.text, answer.text


def test_a_quotation_reported_as_a_claim_is_not_the_passages_own_words():
    """A scam text a warning quotes is dropped from what a passage says; a label to click stays."""
    from rag.service import own_words

    warning = "请只相信官方App内的消息。声称“账号即将被注销”的短信链接都是钓鱼网站。"
    assert "注销" not in own_words(warning) and "钓鱼网站" in own_words(warning)
    assert "will be closed" not in own_words('Links in texts claiming your account "will be closed" are phishing.')
    label = "如果已无法登录，请使用“忘记密码”；"
    assert own_words(label) == label


@pytest.mark.slow
def test_how_to_use_a_discount_code_is_answered_with_how_coupons_are_used(bundled_kb):
    """"discount code" is the glossary's "coupon": the question is answered, and read in the article's terms it names
    the article ("Using coupons"), whose opening says how one is used; it leads, before any entry on why a coupon
    cannot be used."""
    answer = bundled_kb.answer("how do I use a discount code?")
    assert answer.answered and answer.citations[0]["doc_id"] == "coupons-en", (answer.reason, answer.signals)
    assert answer.text.startswith("Your coupons are under Account > Coupons."), answer.text


@pytest.mark.slow
def test_a_phrase_a_warning_quotes_answers_no_question_about_it(bundled_kb):
    """The anti-phishing section quotes a scam text ("账号即将被注销"): that is no account-deletion entry, and the pack
    has none, so "怎么注销账号" is declined; a question about the scam text itself is still answered from it."""
    answer = bundled_kb.answer("怎么注销账号")
    assert not answer.answered and answer.text is None, (answer.confidence, answer.text)
    assert answer.signals["unknown"] > 0, answer.signals
    scam = bundled_kb.answer("收到短信说账号即将被注销是真的吗")
    assert scam.answered and scam.citations[0]["doc_id"] == "suspicious-login-zh", scam.citations[:1]
    assert "钓鱼" in scam.text, scam.text


@pytest.mark.slow
def test_a_plain_status_question_is_no_more_sure_of_the_delayed_parcel_article(bundled_kb):
    """A glossary variant's words count as said by a passage that says its term, but not the words that only ask:
    "where is my parcel" (a variant of "tracking") is no surer of the delayed-parcel article, which says
    "tracking" too."""
    answer = bundled_kb.answer("where is my parcel")
    assert not answer.answered and answer.signals["coverage"] == 0.5, answer.signals


@pytest.mark.slow
def test_a_further_articles_bullets_stay_only_when_they_answer_the_part(bundled_kb):
    """The second part of "退款多久到账？有人让我转账到安全账户怎么办？" is a how-to, which takes its best line's section whole:
    of the anti-phishing section only the bullet on "safe accounts" answers it, not the ones on passwords or a scam
    text."""
    answer = bundled_kb.answer("退款多久到账？有人让我转账到安全账户怎么办？")
    assert answer.answered, (answer.reason, answer.signals)
    assert [c["doc_id"] for c in answer.citations] == ["refund-timelines-zh", "suspicious-login-zh"], answer.citations
    assert "安全账户" in answer.text and "1–3个工作日" in answer.text, answer.text
    assert "密码" not in answer.text and "注销" not in answer.text, answer.text
    # a part that asks what the section is about gets it whole
    scams = bundled_kb.answer("退款多久到账？要防范哪些诈骗？")
    assert all(s in (scams.text or scams.draft) for s in ("密码", "安全账户", "钓鱼")), scams.text


@pytest.mark.slow
@pytest.mark.parametrize("query, doc, says", [
    # the FAQ entries name one payment method each (a row of the article's table): the question names none
    ("how long does a refund take?", "refund-timelines-en", ["Alipay: 1–3", "Visa / Mastercard: 3–7", "PayPal: 3–5"]),
    # the entry asks about socks (one of the excluded items the article lists): the question is about clothes
    ("衣服不合适能退吗", "returns-7day-zh", ["七天无理由退货"]),
])
def test_an_entry_about_one_listed_case_gives_way_to_the_general_rule(bundled_kb, query, doc, says):
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == doc, (answer.reason, answer.citations[:1])
    assert all(s in answer.text for s in says) and "袜子" not in answer.text, answer.text


@pytest.mark.slow
@pytest.mark.parametrize("query, doc, says, not_says", [
    # "Accepted payment methods" in other words: the article's opening list, not its "Saved payment methods"
    ("what payment methods do you accept?", "payment-methods-en", ["Alipay", "WeChat Pay", "UnionPay", "PayPal"],
     "save cards"),
    # an article that opens with a paragraph: the paragraph leads, the passage the question finds follows it
    ("How do I return an item?", "return-process-en", ["start from the order itself", "Apply for after-sales"],
     "parcels sent elsewhere"),
    ("how do I use a coupon code?", "coupons-en", ["Account > Coupons", "selected automatically"],
     "cannot be combined"),
    ("优惠券怎么用", "coupons-zh", ["结算时系统会自动选择"], "不能叠加"),
])
def test_a_question_that_says_an_articles_title_gets_its_opening_list(bundled_kb, query, doc, says, not_says):
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == doc, (answer.reason, answer.citations[:1])
    assert all(s in answer.text for s in says) and not_says not in answer.text, answer.text


@pytest.mark.slow
@pytest.mark.parametrize("query", ["忘了开发票还能补开吗", "订单签收了还能补开发票吗"])
def test_a_late_invoice_request_is_not_read_as_a_reissue(bundled_kb, query):
    """"补开" is asking for an invoice after the order (the electronic-invoice article's own word for it), not
    changing one already issued: the glossary reads it as no re-issue ("重开发票"), so the late-request entry
    answers instead of the re-issue deadline."""
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == "invoice-electronic-zh", (answer.citations[:1],
                                                                                         answer.text)
    assert "补开" in answer.text and "换开" not in answer.text, answer.text


@pytest.mark.slow
@pytest.mark.parametrize("query, doc, says, not_says", [
    # the FAQ entry asks about a broken item ("坏了", the glossary's "破损", a case the article lists as a clause)
    ("退货要自己出运费吗", "return-shipping-cost-zh", ["取决于退货的原因", "买家承担运费"], "商品坏了"),
    ("do I have to pay for return shipping?", "return-shipping-cost-en", ["depends on why", "paid by you"], "broken"),
])
def test_an_entry_about_a_case_listed_as_a_clause_gives_way_to_the_general_rule(bundled_kb, query, doc, says,
                                                                                 not_says):
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == doc, (answer.reason, answer.citations[:1])
    assert all(s in answer.text for s in says) and not_says not in answer.text, answer.text


@pytest.mark.slow
def test_a_how_to_question_gets_the_paragraph_an_faq_answer_shortens(bundled_kb):
    """The FAQ answer names the button alone ("收不到验证码？"); the section says on which page and what follows."""
    answer = bundled_kb.answer("我换了手机号怎么改")
    assert answer.answered and answer.citations[0]["doc_id"] == "password-reset-zh", answer.citations[:1]
    assert "找回密码页" in answer.text and "绑定新手机号" in answer.text, answer.text


def test_a_chinese_list_of_clauses_names_its_cases_by_their_own_words():
    from rag.compose import Composer, article_lines, clause_item
    from rag.rewrite import get_tokenizer

    assert clause_item("商品在运输中破损；") and clause_item("- 发错商品、尺码或颜色；")
    assert not clause_item("提交售后申请时选择“免费上门取件”，快递员会上门取件。") and not clause_item("it arrived damaged;")
    text = ("以下情况由商家承担运费：\n\n- 商品存在质量问题或故障；\n- 商品在运输中破损；\n"
            "- 发错商品、尺码或颜色；\n- 缺少配件或零件。")
    chunks = [Chunk(chunk_id="c0", doc_id="d", text=text, section="质量问题：免费退货", lang="zh")]
    composer = Composer(encoder=None)
    tokenizer = get_tokenizer(set())
    composer.words = lambda t: frozenset(tokenizer.words_of(t))
    cases = composer.cases(article_lines(chunks))
    assert {"破损", "运输", "发错", "配件"} <= cases and "商品" not in cases and "质量" not in cases, cases


def test_the_cases_an_article_lists_are_the_terms_its_items_name():
    from rag.compose import case_terms

    assert case_terms("Alipay: 1–3 business days") == ["Alipay"]
    assert case_terms("UnionPay cards (debit and credit): 3–7 business days") == ["UnionPay cards"]
    assert case_terms("**Underwear and intimate items** – underwear, swimwear, socks and similar items, for hygiene "
                      "reasons;")[:4] == ["", "underwear", "swimwear", "socks"]       # a long head names no case
    assert case_terms("贴身衣物：内衣、内裤、泳衣、袜子等，出于卫生原因不支持；")[:5] == ["贴身衣物", "内衣", "内裤", "泳衣", "袜子等"]
    # a quantity or a sentence names no case
    assert case_terms("签收1–7天：可以无理由退货")[0] == ""
    assert case_terms("Open My Orders, select the order and tap Logistics.") == []


@pytest.mark.slow
@pytest.mark.parametrize("query", ["如何训练小狗坐下", "周末去哪里爬山比较好", "How do I train my dog to sit?",
                                   "Which mountain is the highest in Europe?"])
def test_out_of_scope_questions_get_no_answer_but_the_evidence(e5_kb, query):
    answer = e5_kb.answer(query)
    assert not answer.answered and answer.text is None
    assert answer.passages and answer.citations           # the evidence goes to L2 with the conversation
    assert answer.confidence < e5_kb.config.answer_threshold
    assert "below the answer threshold" in answer.reason


@pytest.mark.slow
def test_traditional_chinese_and_glossary_synonyms_reach_the_article(e5_kb):
    answer = e5_kb.answer("退錢到支付寶要幾天")                 # traditional characters + colloquial 退钱
    assert answer.answered and answer.citations[0]["doc_id"] == "refund-timelines-zh"
    assert "退款" in answer.rewritten_query


def test_extract_takes_the_matched_faq_answer_only():
    tok = get_tokenizer()
    passage = ("Q: How long does a refund to Alipay take?\nA: 1–3 business days after the refund is issued.\n"
               "Q: I paid with a Visa card. When will I see my refund?\nA: Card refunds take 3–7 business days.")
    assert extract(passage, ["long", "refund", "alipay"], tok) == (
        "Q: How long does a refund to Alipay take?\nA: 1–3 business days after the refund is issued.")


def test_extract_brings_the_list_after_an_introduction_and_falls_back_to_the_opening():
    tok = get_tokenizer()
    passage = "订单发货后不能修改地址，但有以下办法：\n联系客服改派；\n拒收后重新下单。\n其他说明。"
    assert extract(passage, ["修改", "地址"], tok) == "订单发货后不能修改地址，但有以下办法：\n联系客服改派；\n拒收后重新下单。"
    assert extract("First sentence. Second one. Third.", ["zebra"], tok) == "First sentence. Second one."


def test_unsupported_sentences_catch_new_facts_and_numbers():
    tok = get_tokenizer()
    hits = [Hit(chunk_id="a#0", score=1.0, chunk=Chunk(chunk_id="a#0", doc_id="a", title="Refunds",
                text="Refunds to Alipay take 1–3 business days after the refund is issued."))]
    assert unsupported_sentences("Refunds to Alipay take 1–3 business days.", hits, tok) == []
    assert unsupported_sentences("Refunds to Alipay take 10 business days.", hits, tok) == [
        "Refunds to Alipay take 10 business days."]
    assert unsupported_sentences("We also send you a free gift voucher.", hits, tok)


def test_a_rephrasing_keeps_the_evidences_names_and_negations():
    tok = get_tokenizer()
    hits = [Hit(chunk_id="r#0", score=1.0, chunk=Chunk(chunk_id="r#0", doc_id="r", title="Returns", text=(
        "Gift cards cannot be returned once the code has been delivered. Refunds to PayPal take 3–5 business days."
        "\n退货运费由买家承担。礼品卡一经发放，不支持退货。")))]
    assert unsupported_sentences("Gift cards cannot be returned once the code is delivered.", hits, tok) == []
    assert unsupported_sentences("Gift cards can be returned once the code has been delivered.", hits, tok)
    assert unsupported_sentences("Refunds to PayPal never take 3–5 business days.", hits, tok)
    assert unsupported_sentences("Refunds to Alipay take 3–5 business days.", hits, tok)      # another name
    assert unsupported_sentences("Refunds to PayPal take 3–5 business days.", hits, tok) == []
    assert unsupported_sentences("礼品卡一经发放，不支持退货。", hits, tok) == []
    assert unsupported_sentences("礼品卡一经发放，支持退货。", hits, tok)


class _ChatStub(BaseHTTPRequestHandler):
    """A stand-in for an external OpenAI-compatible endpoint: replies with the configured text."""

    reply = ""
    seen: list = []

    def do_POST(self):  # noqa: N802 - http.server naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _ChatStub.seen.append((self.path, self.headers.get("Authorization"), body))
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": _ChatStub.reply}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def chat_endpoint():
    server = HTTPServer(("127.0.0.1", 0), _ChatStub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _ChatStub.seen = []
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_generated_answers_are_sent_only_when_every_sentence_is_supported(pool, minilm_encoder, tmp_path,
                                                                          chat_endpoint):
    src = tmp_path / "kb"
    src.mkdir()
    shutil.copy(SAMPLE_KB / "refund-timelines-en.md", src)
    generator = OpenAIChatGenerator(chat_endpoint, "test-model", api_key="k-123")
    # minilm's cosines live on another scale than e5's: this test is about the generator, so always answer
    kb = KnowledgeBase(pool, minilm_encoder, TantivyIndex(tmp_path / "idx"), generator=generator,
                       config=RetrievalConfig(answer_threshold=0.0), sample_dir=src)
    kb.load_sample_if_empty()
    query = "How long does a refund to Alipay take?"

    _ChatStub.reply = "A refund to Alipay takes 1–3 business days after the refund is issued."
    good = kb.answer(query)
    assert good.answered and good.text == _ChatStub.reply and good.reason is None
    path, auth, body = _ChatStub.seen[-1]
    assert path == "/v1/chat/completions" and auth == "Bearer k-123" and body["model"] == "test-model"
    assert "1–3 business days" in body["messages"][1]["content"]          # the passages were sent as context

    _ChatStub.reply = "A refund to Alipay takes 1–3 business days. You will also get 50 bonus points."
    bad = kb.answer(query)
    assert bad.answered and "bonus" not in bad.text and "50" not in bad.text
    assert "1–3 business days" in bad.text                                # the extractive answer instead
    assert "discarded" in bad.reason


def test_an_empty_knowledge_base_answers_nothing(pool, minilm_encoder, tmp_path):
    kb = KnowledgeBase(pool, minilm_encoder, TantivyIndex(tmp_path / "idx"))
    answer = kb.answer("How long does a refund take?")
    assert not answer.answered and answer.reason == "knowledge base is empty"


def test_rerank_mode_without_a_reranker_is_an_error(pool, minilm_encoder, tmp_path):
    from rag.service import RerankerMissing

    kb = KnowledgeBase(pool, minilm_encoder, TantivyIndex(tmp_path / "idx"))
    with pytest.raises(RerankerMissing):
        kb.search("refund", 5, mode="rerank")
    with pytest.raises(ValueError):
        kb.search("refund", 5, mode="splade")


def test_a_missing_index_sends_the_question_to_a_human_instead_of_failing(pool, minilm_encoder, tmp_path):
    src = tmp_path / "kb"
    src.mkdir()
    shutil.copy(SAMPLE_KB / "coupons-en.md", src)
    built = KnowledgeBase(pool, minilm_encoder, TantivyIndex(tmp_path / "built"), sample_dir=src)
    built.load_sample_if_empty()
    # another node whose lexical index directory lacks the active generation
    elsewhere = KnowledgeBase(pool, minilm_encoder, TantivyIndex(tmp_path / "elsewhere"))
    ok, detail = elsewhere.ready()
    assert not ok and "GenerationNotFound" in detail
    answer = elsewhere.answer("do coupons expire")
    assert not answer.answered and answer.reason == "retrieval failed: GenerationNotFound"


ANSWER_SET = Path(__file__).resolve().parent / "answer_set.jsonl"


@pytest.fixture(scope="module")
def answer_set_report(bundled_kb):
    """The project's own answer set (customers' words, zh and en: facts, how-to, two-part questions and questions
    the pack cannot answer) through the real knowledge base, judged by the facts each reply must contain."""
    from rag.eval import evaluate_answer_set, load_answer_set

    rows = load_answer_set(ANSWER_SET)
    assert len(rows) >= 150 and {r["lang"] for r in rows} == {"en", "zh"}
    assert {"fact", "howto", "two_part", "none"} <= {r["kind"] for r in rows}
    return evaluate_answer_set(bundled_kb, rows)


@pytest.mark.slow
def test_answer_set_replies_are_whole_unframed_in_the_customers_language_and_honest(answer_set_report):
    report = answer_set_report
    assert report["framing"] == 0 and report["fragments"] == 0 and report["wrong_language"] == 0, [
        (v["q"], v["text"]) for v in report["verdicts"] if v["framing"] or v["fragment"] or v["wrong_language"]]
    assert report["wrong_answer_unanswerable_rate"] <= 0.03, [v["q"] for v in report["verdicts"]
                                                               if v["kind"] == "none" and v["answered"]]


@pytest.mark.slow
def test_answer_set_is_answered_right(answer_set_report):
    report = answer_set_report
    wrong = [(v["q"], v["answered"], v["text"][:120]) for v in report["verdicts"] if not v["right"]]
    assert report["right_rate"] >= 0.90, (report["right_rate"], wrong)
    assert report["unanswered_answerable_rate"] <= 0.05, [v["q"] for v in report["verdicts"]
                                                           if v["kind"] != "none" and not v["answered"]]


@pytest.mark.slow
@pytest.mark.parametrize("query, doc, says", [
    # the best entry says "See *Delayed or lost parcels*." / "请参考《快递延误或丢件怎么办》。": the reply is that article's
    ("it says delivered but I never got it", "delayed-lost-parcels-en", "48 hours"),
    ("显示已签收但是我没收到", "delayed-lost-parcels-zh", "48小时"),
    # the neighbours share every word but the answer ("within 180 days", "if you cancel an installment order"):
    # the line that states the quantity asked for answers
    ("how many times can I change an invoice?", "invoice-reissue-en", "up to 3 times"),
    ("what's the minimum order for installments", "installments-huabei-en", "¥300"),
])
def test_the_reply_comes_from_the_article_and_line_that_say_it(bundled_kb, query, doc, says):
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == doc, (answer.reason, answer.citations[:1])
    assert says in answer.text and "See " not in answer.text and "请参考" not in answer.text, answer.text


@pytest.mark.slow
@pytest.mark.parametrize("query, doc, says, not_said", [
    # the FAQ entry of the same form is about one case the article lists ("Can I return a gift card?"): the
    # opening's general rule answers, and the entry about the case the customer did not name is left out
    ("can I return the boots?", "returns-7day-en", "7 days", "gift card"),
])
def test_an_entry_about_a_case_not_asked_about_is_left_out(bundled_kb, query, doc, says, not_said):
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == doc, (answer.reason, answer.citations[:1])
    assert says in answer.text and not_said not in answer.text.lower(), answer.text


@pytest.mark.slow
@pytest.mark.parametrize("query, doc, says", [
    ("do you take cash when the parcel arrives?", "payment-methods-en", "cash on delivery"),
    ("how long until I get my money back after returning?", "refund-timelines-en", "business days"),
    # "不喜欢" is the FAQ entry's word; "内衣" is one of the cases the article lists, and its line says what holds
    ("内衣不喜欢可以退吗", "returns-7day-zh", "卫生原因不支持"),
])
def test_the_entry_that_says_what_is_asked_leads_over_a_neighbour_with_more_shared_words(bundled_kb, query, doc, says):
    answer = bundled_kb.answer(query)
    assert answer.passages[0].chunk.doc_id == doc, [h.chunk_id for h in answer.passages]
    assert says in (answer.text or answer.draft or ""), answer.draft


@pytest.mark.slow
def test_words_the_pack_never_uses_make_an_answer_less_likely(bundled_kb):
    asked = bundled_kb.answer("学生有优惠吗")           # students: the coupons article comes close, but never says it
    assert asked.signals["unknown"] > 0 and not asked.answered, asked.signals
    known = bundled_kb.answer("退款到支付宝要多久")
    assert known.signals["unknown"] == 0 and known.answered and "1–3个工作日" in known.text
    # the words that only ask ("几次") and search-mode cuts around a known word ("最多能" around "最多") are not unknown
    assert bundled_kb.answer("发票最多能改几次").signals["unknown"] == 0
    from rag.confidence import confidence, model_of

    # a knowledge base's own fit weighs the signal (the bundled pack's calibration.yaml); the defaults leave it out
    model = model_of(bundled_kb.config)
    assert model["unknown_weight"] < 0.0 and RetrievalConfig().unknown_weight == 0.0
    unweighed = {**model, "unknown_weight": 0.0}
    assert confidence(asked.signals, model) < confidence(asked.signals, unweighed)
    assert confidence(known.signals, model) == confidence(known.signals, unweighed)


@pytest.mark.slow
@pytest.mark.parametrize("query, doc, says, near_misses", [
    # the pack never says "boots": its returns articles speak of "items", and returning one is what is asked
    ("can I return the boots?", "returns-7day-en", "7 days",
     # what is asked of the boots themselves, or an action no article covers, stays unsure
     ["can I rent the boots?", "what size are the boots?", "how much do the boots cost?", "is the lamp in stock?",
      "do you sell garden hoses in blue?"]),
    ("can I cancel the boots?", "order-cancellation-en", "cancel",
     ["do you sell the boots in blue?", "are the boots waterproof?"]),
    ("the kettle arrived damaged", "compensation-policy-en", "48 hours",
     ["how do I descale the kettle?", "is the kettle dishwasher safe?"]),
])
def test_the_name_of_a_thing_the_pack_never_names_does_not_sink_a_question_it_covers(bundled_kb, query, doc, says,
                                                                                     near_misses):
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == doc, (answer.reason, answer.signals)
    assert says in answer.text and "deposit" not in answer.text, answer.text   # not an entry about another thing
    assert answer.signals["unknown"] == 0, answer.signals
    for near in near_misses:
        missed = bundled_kb.answer(near)
        assert not missed.answered, (near, missed.confidence, missed.signals, missed.text)


@pytest.mark.slow
@pytest.mark.parametrize("query, near_miss", [
    ("the lamp arrived broken, what are my options?", "the lamp flickers, what are my options?"),
    ("the lamp arrived broken, what are my choices?", "I want to rent a lamp, what are my options?"),
    ("the lamp arrived broken, what now?", "the lamp is too dim, what now?"),
])
def test_a_part_that_only_asks_what_to_do_does_not_sink_the_question(bundled_kb, query, near_miss):
    """"..., what are my options?" is answered as "..., what can I do?" is, from the damaged-goods entry; the same
    asking part after something no article covers stays unsure."""
    plain = bundled_kb.answer("hey, the lamp arrived broken, what can I do?")
    answer = bundled_kb.answer(query)
    assert plain.answered and answer.answered, (answer.reason, answer.signals)
    assert answer.citations[0]["doc_id"] == plain.citations[0]["doc_id"] == "compensation-policy-en"
    assert {c["doc_id"] for c in answer.citations} == {"compensation-policy-en"}, answer.text   # one question
    assert "48 hours" in answer.text and "replacement" in answer.text, answer.text
    missed = bundled_kb.answer(near_miss)
    assert not missed.answered, (near_miss, missed.confidence, missed.signals, missed.text)


def test_the_part_asked_about_leaves_out_a_last_part_that_only_asks_what_to_do():
    from rag.compose import asked_about, only_asks

    assert asked_about("the lamp arrived broken, what are my options?") == "the lamp arrived broken"
    assert asked_about("hey, the lamp arrived broken, what can I do?") == "hey, the lamp arrived broken"
    assert asked_about("my parcel is late, what now?") == "my parcel is late"
    assert asked_about("灯坏了，我该怎么办？") == "灯坏了"
    # a part that asks for a quantity, a time or a reason says what is asked, and a question of one part is whole
    for whole in ("I returned the boots, how long?", "my account is frozen, why?", "the boots, when?",
                  "退款了，多久到？", "what are my options?", "can I return the boots?",
                  "the lamp arrived broken, can I return it?"):
        assert asked_about(whole) == whole, whole
    assert only_asks("what are my options") and not only_asks("what are the return options")
    # a short Chinese part that names what it asks about beside its asking words ("能注销吗": 注销) asks about it
    assert only_asks("怎么办") and only_asks("可以吗") and only_asks("我该怎么办")
    assert not only_asks("能注销吗") and asked_about("账号不想用了，能注销吗") == "账号不想用了，能注销吗"


@pytest.mark.slow
@pytest.mark.parametrize("query, doc, says", [
    ("what is your return policy?", "returns-7day-en", "within 7 days"),
    ("退货政策是什么", "returns-7day-zh", "七天无理由退货"),
])
def test_what_customers_call_an_article_finds_it_and_its_opening_answers(pool, e5_encoder, tmp_path, query, doc,
                                                                           says):
    """An article's keywords (its front matter) are what customers call it: "return policy" for "7-day no-reason
    returns". Without them the question is closer to the other return articles' words and is not answered from
    the 7-day article; with them it is, from the article's opening; a sync that changes only the keywords is seen."""
    from rag.config import load_calibration

    src = tmp_path / "kb"
    src.mkdir()
    for name in ("returns-7day", "return-process", "return-shipping-cost", "compensation-policy", "points",
                 "refund-timelines"):
        for lang in ("en", "zh"):
            text = (SAMPLE_KB / f"{name}-{lang}.md").read_text(encoding="utf-8")
            (src / f"{name}-{lang}.md").write_text("".join(ln for ln in text.splitlines(keepends=True)
                                                           if not ln.startswith("keywords:")), encoding="utf-8")
    for extra in ("glossary.yaml", "calibration.yaml"):
        shutil.copy(SAMPLE_KB / extra, src)
    glossary = load_glossary(src)
    kb = KnowledgeBase(pool, e5_encoder, TantivyIndex(tmp_path / "idx", tokenizer=get_tokenizer(glossary.words())),
                       glossary=glossary, config=RetrievalConfig(**load_calibration(src, "multilingual-e5-small")),
                       sample_dir=src)
    kb.load_sample_if_empty()
    unnamed = kb.answer(query)
    assert not (unnamed.answered and unnamed.citations[0]["doc_id"] == doc), unnamed.text
    shutil.copy(SAMPLE_KB / f"{doc}.md", src)          # the pack's article, with its keywords
    assert kb.generations.sync(src)["updated_docs"] == 1
    named = kb.answer(query)
    assert named.answered and named.citations[0]["doc_id"] == doc, (named.reason, named.citations[:1])
    assert says in named.text.splitlines()[0], named.text


# the conversations of issue #33, each the first message of a new conversation: a set judged together
ISSUE_CONVERSATIONS = ("what is your return policy?", "衣服不合适能退吗", "退货的运费谁来出", "how long does shipping take?",
                       "can I pay with PayPal or Apple Pay?", "快递一般几天到？",
                       "when does my order ship and how long until it arrives?", "下单以后多久发货，一般几天能到")
# what their replies must say, and what they must not: the entry beside the answer that shares its words
ISSUE_FACTS = [
    ("how long does shipping take?", ["16:00", "1–2 days", "2–4 days"], ["Is shipping free", "¥99", "¥8"]),
    ("when does my order ship and how long until it arrives?", ["16:00", "1–2 days", "2–4 days"],
     ["refund", "Which courier", "SF Express for major cities"]),
    ("快递一般几天到？", ["16:00", "1–2天", "2–4天"], ["包邮", "99元"]),
    ("下单以后多久发货，一般几天能到", ["16:00", "1–2天", "2–4天"], ["退款", "99元"]),
    ("can I pay with PayPal or Apple Pay?", ["PayPal", "Apple Pay", "CNY"], ["Q:", "A:"]),
]


@pytest.mark.slow
def test_the_issues_conversations_are_answered_right(answer_set_report):
    verdicts = {v["q"]: v for v in answer_set_report["verdicts"]}
    wrong = [(q, verdicts[q]["answered"], verdicts[q]["text"][:120]) for q in ISSUE_CONVERSATIONS
             if not verdicts[q]["right"]]
    assert not wrong, wrong


@pytest.mark.slow
@pytest.mark.parametrize("query, says, never", ISSUE_FACTS)
def test_the_issues_replies_say_what_is_asked_and_not_the_entry_beside_it(answer_set_report, query, says, never):
    """"How long does shipping take?" shares its form and "shipping" with "Is shipping free?": the reply gives
    the delivery times, and a question of two parts gets both, from the article that answers them."""
    text = next(v["text"] for v in answer_set_report["verdicts"] if v["q"] == query)
    assert all(s in text for s in says) and not any(n in text for n in never), text


@pytest.mark.parametrize("question, answer, alone", [
    ("Can I pay with PayPal?", "Yes, if your account is registered abroad. You are charged in CNY.",
     "You can pay with PayPal if your account is registered abroad. You are charged in CNY."),
    ("Do you accept cash on delivery?", "No. Orders must be paid online.",
     "We do not accept cash on delivery. Orders must be paid online."),
    ("能用PayPal付款吗？", "可以，按人民币扣款。", "能用PayPal付款，按人民币扣款。"),
    ("商品坏了，退回来要我出运费吗？", "不需要。质量问题的退货都是免运费的。", "商品坏了，退回来不需要我出运费。质量问题的退货都是免运费的。"),
    ("How long is the code valid?", "10 minutes.", "10 minutes."),
    ("Are members charged?", "No. All tiers are free.", "All tiers are free."),     # the answer's own words
    ("Is there a fee for membership?", "No. All tiers are free.", "There is no fee for membership. All tiers are free."),
    # a question said after what it is about asks its last sentence
    ("I typed the wrong address. Can I still fix it?", "Yes, if the order is still Awaiting shipment.",
     "You can still fix it if the order is still Awaiting shipment."),
    # what follows the yes is a sentence of its own, not the statement's continuation
    ("Will I get my money back if I cancel?", "Yes, the full amount goes back to your original payment method.",
     "You will get your money back if you cancel. The full amount goes back to your original payment method."),
    ("Can I pay in installments?", "Yes, for orders of ¥300 or more.", "You can pay in installments for orders of ¥300 "
     "or more."),
    ("Is shipping free?", "Yes for orders of ¥99 or more.", None),       # a yes that cannot be said without its question
    ("Is it free?", "Yes.", None),
])
def test_an_faq_answer_is_said_alone_and_its_yes_or_no_as_a_sentence(question, answer, alone):
    from rag.compose import answer_alone

    assert answer_alone(question, answer) == alone


def _faq_article(doc_id: str, lang: str, text: str) -> tuple[Hit, list[Chunk]]:
    chunk = Chunk(chunk_id=f"{doc_id}#0", doc_id=doc_id, title=doc_id, section="FAQ", text=text, lang=lang,
                  content_hash=doc_id)
    return Hit(chunk_id=chunk.chunk_id, score=1.0, chunk=chunk), [chunk]


@pytest.mark.parametrize("query, text, question, said", [
    ("who pays the postage for a broken item?",
     "Q: Do I have to pay postage to return a broken item?\nA: No. Returns for quality problems have free return "
     "shipping.\nQ: How much is a no-reason pickup?\nA: A pickup costs ¥12, deducted from the refund.",
     "Do I have to pay postage to return a broken item?",
     "You do not have to pay postage to return a broken item. Returns for quality problems have free return shipping."),
    ("退货的运费谁来出", "问：商品坏了，退回来要我出运费吗？\n答：不需要。质量问题的退货都是免运费的。\n"
     "问：不想要了退货，运费多少钱？\n答：App预约上门取件统一12元，从退款中扣除。",
     "商品坏了，退回来要我出运费吗？", "商品坏了，退回来不需要我出运费。质量问题的退货都是免运费的。"),
])
def test_an_faq_reply_says_the_answer_not_the_entrys_question(minilm_encoder, query, text, question, said):
    """A reply is the answer; the entry's question above it reads like a database entry."""
    from rag.compose import Composer

    hit, chunks = _faq_article("faq", "zh" if "问" in text else "en", text)
    comp = Composer(minilm_encoder).compose(query, [hit], lambda ids: {"faq": chunks}, lang=hit.chunk.lang)
    assert question not in comp.text.splitlines() and said in comp.text.splitlines(), comp.text
    plain, chunks = _faq_article("plain", "en", "Q: How much is a no-reason pickup?\nA: A pickup costs ¥12, deducted "
                                 "from the refund.")
    told = Composer(minilm_encoder).compose("how much is a pickup?", [plain], lambda ids: {"plain": chunks}, lang="en")
    assert told.text == "A pickup costs ¥12, deducted from the refund.", told.text


@pytest.mark.parametrize("text, defers", [
    ("Who pays for sending an item back depends on why you are returning it.", True),
    ("Whether you can cancel, and how fast, depends on the order status.", True),
    ("退货运费由谁承担，取决于退货的原因。", True), ("能否取消订单、多快能取消，取决于订单当前的状态。", True),
    ("It depends on the carrier.", True), ("运费多少视地区而定，具体要看哪家快递。", True),
    ("Membership is free: your tier depends only on how much you spend.", False),
    ("到账时间取决于支付方式，详见《退款到账时间》。", False), ("Refunds take 3–7 business days.", False),
])
def test_a_line_that_defers_to_cases_is_told_by_its_form(text, defers):
    from rag.compose import defers as deferring

    assert deferring(text) is defers


@pytest.mark.slow
@pytest.mark.parametrize("query, doc, cases", [
    ("退货运费谁出？", "return-shipping-cost-zh", ["取决于", "北风商城承担", "买家承担", "12元"]),
    ("Who pays for return shipping?", "return-shipping-cost-en", ["depends on", "free", "paid by you", "¥12"]),
])
def test_an_opening_that_defers_goes_on_with_the_articles_cases(bundled_kb, query, doc, cases):
    """"It depends on why you return it" and one case is half an answer: every case follows, briefly."""
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == doc, (answer.reason, answer.citations[:1])
    assert all(c in answer.text for c in cases), answer.text


def test_answer_lines_are_encoded_once_and_a_restart_warms_from_the_database(pool, minilm_encoder, tmp_path):
    class Counting:
        """The real encoder, counting the texts it is asked to encode."""

        def __init__(self, encoder):
            self.encoder, self.texts = encoder, 0

        def __getattr__(self, name):
            return getattr(self.encoder, name)

        def encode_queries(self, texts, *args, **kwargs):
            self.texts += len(texts)
            return self.encoder.encode_queries(texts, *args, **kwargs)

    src = tmp_path / "kb"
    src.mkdir()
    shutil.copy(SAMPLE_KB / "coupons-en.md", src)
    first = Counting(minilm_encoder)
    kb = KnowledgeBase(pool, first, TantivyIndex(tmp_path / "idx"), sample_dir=src, encoder_name="minilm")
    kb.load_sample_if_empty()
    heard: list[tuple[int, int]] = []
    lines = kb.warm(progress=lambda done, total: heard.append((done, total)))
    assert lines > 10 and first.texts >= lines
    # progress comes batch by batch, never backwards, and ends with everything encoded
    assert len(heard) > 2 and heard[-1][0] == heard[-1][1] > lines
    assert all(a[0] <= b[0] for a, b in zip(heard, heard[1:]))
    # another process over the same database: every line's vector is read, none is encoded
    again = Counting(minilm_encoder)
    restarted = KnowledgeBase(pool, again, TantivyIndex(tmp_path / "idx"), encoder_name="minilm")
    assert restarted.warm() == lines and again.texts == 0
    answer = restarted.answer("do coupons expire")
    assert answer.draft or answer.text                          # composed from the stored vectors


@pytest.mark.slow
@pytest.mark.parametrize("query, parts", [
    ("how much is return shipping and how long does the refund take?",
     {"return-shipping-cost-en": "¥12", "refund-timelines-en": "48 hours"}),
    ("退货运费多少钱，退款多久到账", {"return-shipping-cost-zh": "12元", "refund-timelines-zh": "工作日"}),
])
def test_each_part_of_a_two_part_question_gets_its_own_entry_and_citation(bundled_kb, query, parts):
    answer = bundled_kb.answer(query)
    assert answer.answered, answer.reason
    cited = [c["doc_id"] for c in answer.citations]
    assert all(doc in cited for doc in parts) and all(fact in answer.text for fact in parts.values()), (
        cited, answer.text)


@pytest.mark.slow
@pytest.mark.parametrize("query, doc, says, not_says", [
    # "保修与维修服务" joins two subjects: the question names repairs, the FAQ entry "保修期多久？" the warranty
    ("维修要多久", "warranty-repairs-zh", "7–15个工作日", "签收后1年"),
    ("维修多长时间", "warranty-repairs-zh", "7–15个工作日", "签收后1年"),
    ("保修期多久", "warranty-repairs-zh", "签收后1年", "7–15个工作日"),
    # "amex" is no word of the pack; the glossary says it is "American Express", which one line names (the
    # FAQ entry "Do you accept cash on delivery?" only shares "accept")
    ("do you accept amex?", "payment-methods-en", "American Express", "Orders must be paid online"),
    ("can I pay with my amex card?", "payment-methods-en", "American Express", "Orders must be paid online"),
    # a word the pack uses keeps its entry though the glossary knows it ("银行卡" of 银联)
    ("两张银行卡能一起付吗", "payment-methods-zh", "不能同时使用两张银行卡", "美国运通"),
])
def test_the_entry_about_another_subject_gives_way_to_the_line_that_names_what_is_asked(bundled_kb, query, doc,
                                                                                     says, not_says):
    answer = bundled_kb.answer(query)
    assert answer.citations and answer.citations[0]["doc_id"] == doc, (answer.reason, answer.citations[:1])
    text = answer.text or answer.draft or ""
    assert says in text and not_says not in text, text


@pytest.mark.slow
def test_a_card_the_pack_never_names_gets_no_answer(bundled_kb):
    """Neither the pack nor its glossary knows "Diners Club": the cash-on-delivery entry that shares "accept" is no
    answer to it, and the question goes to a person."""
    answer = bundled_kb.answer("do you accept Diners Club?")
    assert not answer.answered and answer.text is None, answer.text


def test_a_list_whose_items_run_on_is_rendered_as_one_sentence():
    from rag.compose import article_lines, render
    from rag.types import Chunk

    # as the chunker stores a Markdown list: one item per line, its marker removed
    text = ("On one order you can use:\none store-wide or category coupon, plus\none shipping coupon, plus\n"
            "points.\n\nTwo store-wide coupons cannot be combined.")
    chunk = Chunk(chunk_id="c#0", doc_id="coupons", text=text, title="Using coupons", section="Combining coupons",
                  lang="en")
    lines = article_lines([chunk])
    assert [ln.kind for ln in lines[:4]] == ["intro", "item", "item", "item"], lines
    shown = render(lines[:4]).splitlines()
    # "plus" joins an item to the next: no full stop cuts the sentence (one bullet); the last item ends it
    assert shown == ["On one order you can use:", "• one store-wide or category coupon, plus",
                     "one shipping coupon, plus", "points."], shown
    # an item that runs on but is the last one shown is closed as a sentence
    assert render(lines[:2]).splitlines()[-1] == "one store-wide or category coupon, plus."


def test_items_of_one_list_are_said_as_a_list_and_a_lone_item_as_a_sentence():
    from rag.compose import article_lines, render
    from rag.types import Chunk

    text = ("Return shipping is free when the return is our responsibility:\nthe item is faulty;\nit arrived damaged;\n"
            "parts are missing.")
    chunk = Chunk(chunk_id="r#0", doc_id="returns", text=text, title="Return shipping", section="Quality problems",
                  lang="en")
    lines = article_lines([chunk])
    assert [ln.kind for ln in lines] == ["intro", "item", "item", "item"], lines
    assert render(lines).splitlines() == ["Return shipping is free when the return is our responsibility:",
                                          "• the item is faulty.", "• it arrived damaged.", "• parts are missing."]
    assert render(lines[:2]).splitlines() == ["Return shipping is free when the return is our responsibility:",
                                              "the item is faulty."]


def test_a_short_list_its_case_announces_is_said_whole(bundled_kb):
    """"who pays for return shipping?": the no-reason case announces "You have two options:"; both are said."""
    answer = bundled_kb.answer("who pays for return shipping?")
    assert answer.answered and "Book a pickup in the app" in answer.text and "Send it yourself" in answer.text, \
        answer.text


STEPS = ("Apply from the order itself.\n1. Open My Orders and select the order.\n2. Choose the type of request:\n"
         "Return & refund – you send the item back;\nExchange – same product, different size.\n"
         "3. Submit. Most requests are approved within 24 hours.\nIf a request is refused, we tell you why.")


def test_numbered_steps_keep_their_numbers_and_the_lines_a_step_introduces():
    """Order matters in steps: "1. 2. 3." are said as the article numbers them, a step's own options under it."""
    from rag.compose import article_lines, render

    chunk = Chunk(chunk_id="s#0", doc_id="steps", text=STEPS, title="Returning", section="Step by step", lang="en")
    lines = article_lines([chunk])
    assert [ln.kind for ln in lines] == ["para", "item", "item", "item", "item", "item", "para"], lines
    assert len({ln.group for ln in lines[1:6]}) == 1 and lines[3].label == lines[2].idx     # one list, 3 under 2
    assert render(lines[1:6]).splitlines() == [
        "1. Open My Orders and select the order.", "2. Choose the type of request:",
        "  • Return & refund – you send the item back.", "  • Exchange – same product, different size.",
        "3. Submit. Most requests are approved within 24 hours."]


def test_a_question_about_one_step_gets_every_step_in_order(minilm_encoder):
    """A step said alone, or the steps after the one that matched, leaves the customer in the middle."""
    from rag.compose import Composer

    chunk = Chunk(chunk_id="s#0", doc_id="steps", text=STEPS, title="Returning", section="Step by step", lang="en",
                  content_hash="steps")
    hit = Hit(chunk_id=chunk.chunk_id, score=1.0, chunk=chunk)
    comp = Composer(minilm_encoder).compose("are requests approved within 24 hours?", [hit],
                                            lambda ids: {"steps": [chunk]}, lang="en")
    shown = comp.text.splitlines()
    assert [s[:2] for s in shown if s[:1].isdigit()] == ["1.", "2.", "3."] and "  • Exchange" in comp.text[1:], shown
    assert "•" not in "".join(s for s in shown if not s.startswith("  • ")), shown


def test_a_reply_does_not_ask_and_says_a_fact_once():
    """"Changed your mind?" is the article's hook, not an answer; the FAQ answer after the opening that says the
    same 7 days reads as the same thing twice. A quoted button name that ends in "?" is no question."""
    from rag.compose import Composer, Line

    opening = ("Changed your mind? Most items can be returned within 7 days without giving a reason. The 7 days "
               "start on the day after the parcel is signed for.")
    entries = [[Line(0, 0, opening, "")],
               [Line(0, 5, "Q: How many days do I have to return an item?", "FAQ", "faq_q", 1),
                Line(0, 6, "A: 7 days, counted from the day after you sign for the parcel.", "FAQ", "faq_a", 1)],
               [Line(0, 8, 'Tap "Can\'t receive the code?" and complete identity verification.', "")],
               [Line(0, 9, "Refunds for 7 days of delay are paid in 14 days.", "")]]
    composer = Composer(None)
    tokenizer = get_tokenizer()
    composer.words = lambda text: frozenset(_stem(w) for w in tokenizer.words_of(text))     # as the service sets it
    said = composer.said_once(entries)
    assert [[x.text for x in e] for e in said] == [
        ["Most items can be returned within 7 days without giving a reason. The 7 days start on the day after the "
         "parcel is signed for."], [], ['Tap "Can\'t receive the code?" and complete identity verification.'],
        ["Refunds for 7 days of delay are paid in 14 days."]]    # a new number is a new fact


def test_a_fact_said_again_in_another_inflection_is_said_once():
    """"has not updated for 72 hours" and the FAQ's "After 72 hours without an update" say one fact: a word and its
    inflections ("update", "updated", "updates") are one word when a reply checks what it already said."""
    from rag.compose import Composer, Line

    stalled = ("If the tracking has not updated for 72 hours, the parcel is considered stalled. Contact us and we will "
               "open an investigation with the carrier. We give you the result within 5 business days.")
    entries = [[Line(0, 0, stalled, "")],
               [Line(0, 5, "Q: My tracking hasn't moved for three days. What should I do?", "FAQ", "faq_q", 1),
                Line(0, 6, "A: Contact us. After 72 hours without an update we open an investigation and reply within "
                     "5 business days.", "FAQ", "faq_a", 1)]]
    composer = Composer(None)
    tokenizer = get_tokenizer()
    composer.words = lambda text: frozenset(_stem(w) for w in tokenizer.words_of(text))     # as the service sets it
    assert [[x.text for x in e] for e in composer.said_once(entries)] == [[stalled], []]


@pytest.mark.slow
@pytest.mark.parametrize("query, doc, says, repeated", [
    # the opening says the 7 days and when they start; the FAQ answer says both again
    ("how many days do I have to return something?", "returns-7day-en", "within 7 days", "counted from the day after"),
    ("退货期限是几天", "returns-7day-zh", "七天从签收的次日开始计算", "签收次日起7天内"),
])
def test_a_bundled_reply_opens_with_the_answer_and_says_it_once(bundled_kb, query, doc, says, repeated):
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == doc, (answer.reason, answer.citations[:1])
    assert says in answer.text and repeated not in answer.text, answer.text
    assert not any(s.rstrip().endswith(("?", "？")) for s in split_sentences(answer.text)), answer.text


@pytest.mark.slow
@pytest.mark.parametrize("query, doc, steps", [
    ("How do I return an item?", "return-process-en", 5),
    ("怎么申请退货", "return-process-zh", 5),
    ("the parcel says delivered but I can't find it", "delayed-lost-parcels-en", 3),
    ("忘记密码怎么办", "password-reset-zh", 4),
])
def test_bundled_steps_are_said_numbered_whole_and_in_order(bundled_kb, query, doc, steps):
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == doc, (answer.reason, answer.citations[:1])
    numbered = [ln.split(".")[0] for ln in answer.text.splitlines() if ln[:1].isdigit()]
    assert numbered == [str(k) for k in range(1, steps + 1)], answer.text
    assert "• " not in "\n".join(ln for ln in answer.text.splitlines() if ln[:1].isdigit()), answer.text


@pytest.mark.slow
@pytest.mark.parametrize("query, doc, says", [
    ("do you ship to Canada?", "shipping-times-en", "We do not ship to other countries or regions"),
    ("do you ship internationally?", "shipping-times-en", "We do not ship to other countries or regions"),
    ("can you deliver to the US?", "shipping-times-en", "We do not ship to other countries or regions"),
    ("你们能寄到美国吗", "shipping-times-zh", "目前暂不支持寄往其他国家和地区"),
    ("do you ship to Hong Kong?", "shipping-times-en", "3–6 business days"),
    ("能寄到香港吗", "shipping-times-zh", "3–6个工作日"),
])
def test_a_place_the_pack_never_names_is_what_it_says_of_other_places(bundled_kb, query, doc, says):
    """The delivery article names Hong Kong and Macau and "does not ship to other countries or regions": a country it
    never names, or abroad in a word, is no word it lacks but one of those places; the places it names stay its own."""
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == doc, (answer.reason, answer.signals)
    assert says in answer.text, answer.text
    assert answer.signals["unknown"] <= 0.34, answer.signals


@pytest.mark.slow
@pytest.mark.parametrize("query", ["do you sell phone cases in Canada?", "do you sell phone cases?",
                                   "is the lamp in stock in Japan?", "美国的商品可以买吗"])
def test_a_place_makes_nothing_else_answerable(bundled_kb, query):
    missed = bundled_kb.answer(query)
    assert not missed.answered, (query, missed.confidence, missed.signals, missed.text)


@pytest.mark.slow
@pytest.mark.parametrize("query", [
    "我想注销账号", "我要注销账号", "想注销我的账号怎么弄", "账号不想用了，能注销吗", "账户可以注销吗", "我要销户",
    "how do I delete my account?", "I want to delete my account", "I want to close my account",
    "can I deactivate my account permanently", "please delete my account", "帮我把账号注销掉"])
def test_a_wish_is_no_word_of_what_is_asked_so_closing_an_account_is_declined(bundled_kb, query):
    """The pack has no article on closing an account: the phishing warning that quotes "账号即将被注销" is no answer. A
    wish ("我想", "我要", "want") names nothing an article says: counted as a word of the question it made the unknown
    "注销" half as telling ("我想注销账号" was answered from the warning at 0.60)."""
    answer = bundled_kb.answer(query)
    assert not answer.answered, (answer.confidence, answer.signals, answer.text)
    if answer.passages and answer.passages[0].chunk.doc_id.startswith("suspicious-login"):
        # met only in the scam text the warning quotes: no evidence, not even for a topic's agreement (router)
        assert answer.confidence < 0.05, (answer.confidence, answer.signals)


@pytest.mark.slow
@pytest.mark.parametrize("query", ["收到短信说账号即将被注销是真的吗", "有短信说我的账号要被注销，要点链接吗"])
def test_a_question_about_the_quoted_scam_text_is_still_answered_from_the_warning(bundled_kb, query):
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == "suspicious-login-zh", (answer.signals,
                                                                                      answer.citations[:1])
    assert "钓鱼" in answer.text, answer.text


@pytest.mark.slow
@pytest.mark.parametrize("query, doc, says, not_says", [
    ("能开发票吗", "invoice-electronic-zh", "补开发票", "换开"),
    ("怎么开发票", "invoice-electronic-zh", "发票", "换开"),
    ("你们开不开发票", "invoice-electronic-zh", "发票", "换开"),
    ("how do I get an invoice?", "invoice-electronic-en", "checkout", "Resend"),
    ("can I get an invoice?", "invoice-electronic-en", "checkout", "Resend"),
    ("where do I request an invoice", "invoice-electronic-en", "My Orders", "Resend"),
])
def test_an_article_on_a_narrower_subject_gives_way_to_the_one_on_what_is_asked(bundled_kb, query, doc, says,
                                                                                 not_says):
    """"发票修改与重开" / "Changing or re-issuing an invoice" is about reissuing, a narrower subject than getting an
    invoice (the glossary's "重开发票" holds "发票"): its entries ("税号填错了怎么办？" answered with "换开发票", "How do I
    get the invoice PDF again?") give way to the article on getting one."""
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == doc, (answer.reason, answer.citations[:1], answer.text)
    assert says in answer.text and not_says not in answer.text, answer.text


def test_a_title_of_narrower_subjects_only_is_narrower():
    from rag.rewrite import load_glossary

    g = load_glossary(SAMPLE_KB)
    assert g.narrower_article("能开发票吗", "发票修改与重开")
    assert g.narrower_article("how do I get an invoice?", "Changing or re-issuing an invoice")
    assert g.narrower_article("怎么退货", "退货运费说明")
    # a title that names what is asked as well is about it
    assert not g.narrower_article("how much is shipping?", "Delivery times, carriers and shipping fees")
    assert not g.narrower_article("how do I reissue an invoice", "Changing or re-issuing an invoice")
    assert not g.narrower_article("能开发票吗", "电子发票开具说明")


@pytest.mark.slow
@pytest.mark.parametrize("query, doc, says", [
    ("my order came with something missing", "compensation-policy-en", "missing item free of charge"),
    ("one item is missing from my package", "compensation-policy-en", "48 hours"),
    ("包裹里少了一件东西", "compensation-policy-zh", "免费补发"),
    ("订单能加东西吗", "order-change-address-zh", "另外下单"),
    ("已经付款了还能加购吗", "order-change-address-zh", "另外下单"),
    ("我想在订单里再添加一个商品", "order-change-address-zh", "另外下单"),
    ("is it possible to add more items after paying", "order-change-address-en", "separate order"),
    ("can I add an item to my order?", "order-change-address-en", "separate order"),
    ("I forgot something, can I add it to my order?", "order-change-address-en", "separate order"),
])
def test_the_article_that_covers_it_answers_what_its_faq_now_asks(bundled_kb, query, doc, says):
    """The compensation policy covers missing items and the order-change article adding items, each in a paragraph
    the questions were not close to ("my order came with something missing" was declined, "订单能加东西吗" found the
    coupons' "一个订单能用两张券吗"): each now has the FAQ entry customers ask."""
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == doc, (answer.reason, answer.signals,
                                                                      answer.citations[:1], answer.text)
    assert says in answer.text and "叠加" not in answer.text and "coupon" not in answer.text, answer.text


@pytest.mark.slow
@pytest.mark.parametrize("query", ["how do I use a promo code?", "where do I enter my promo code",
                                   "my promo code doesn't work", "can I use two promo codes at once?"])
def test_a_variant_of_a_word_the_articles_never_say_is_read_in_the_glossarys_term(bundled_kb, query):
    """"promo" is no word of the pack: the encoder placed "promo code" near the verification code's passages, and
    "how do I use a promo code?" was declined while "discount code" was answered; read as "coupon" it is answered
    from the coupons article."""
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == "coupons-en", (answer.reason, answer.signals,
                                                                             answer.citations[:1])
    assert "verification" not in answer.text, answer.text


def test_a_bare_head_noun_reads_as_its_one_term():
    from rag.rewrite import load_glossary

    g = load_glossary(SAMPLE_KB)
    assert g.with_heads("I didn't get the code") == ("I didn't get the verification code", ["verification code"])
    assert g.with_heads("my promo code doesn't work")[1] == []           # a variant said whole is its own term
    assert g.with_heads("I never received the verification code")[1] == []
    assert g.with_heads("code please")[1] == []                          # no determiner: not read
    assert g.with_heads("收不到码")[1] == []


@pytest.mark.slow
@pytest.mark.parametrize("query", ["I didn't get the code", "the code never came", "I haven't received my code yet",
                                   "I never got a code"])
def test_a_code_the_customer_was_sent_is_the_verification_code(bundled_kb, query):
    """A bare "code" is read as the one term it heads, "verification code", when that reading brings the question
    closer to the knowledge base (the steps for a code that does not arrive); "I didn't get the code" was unsure
    (0.05) and read the section on a lost phone number."""
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == "password-reset-en", (answer.reason, answer.signals,
                                                                                    answer.citations[:1])
    assert "spam" in answer.text, answer.text


@pytest.mark.slow
@pytest.mark.parametrize("query", ["the app won't open", "the app won't load", "the app keeps crashing",
                                   "the app freezes on the home screen", "your app is not working on my phone",
                                   "app打不开", "App一直闪退", "app加载不出来", "app没反应", "app进不去"])
def test_a_reported_failure_is_answered_only_from_a_passage_whose_headings_name_it(bundled_kb, query):
    """"app打不开" was answered with the steps under "支付失败或重复扣款 > 可以这样尝试" (the first says "App"), "the app
    won't load" with an account-freeze section that says "Open the app": those headings name another failure, and
    the pack has no article on the app, so neither is an answer."""
    answer = bundled_kb.answer(query)
    assert not answer.answered, (answer.confidence, answer.signals, answer.citations[:1], answer.text)


@pytest.mark.slow
@pytest.mark.parametrize("query, doc", [("my coupon doesn't work", "coupons-en"), ("付款失败怎么办", "payment-failed-zh"),
                                        ("验证码收不到", "password-reset-zh"), ("app登不上", "account-frozen-zh"),
                                        ("my payment keeps failing", "payment-failed-en"),
                                        ("my account is frozen", "account-frozen-en"),
                                        ("my parcel is stuck in transit", "delayed-lost-parcels-en"),
                                        ("the payment page won't open", "payment-failed-en")])
def test_a_reported_failure_whose_headings_name_it_is_still_answered(bundled_kb, query, doc):
    answer = bundled_kb.answer(query)
    assert answer.answered and answer.citations[0]["doc_id"] == doc, (answer.reason, answer.signals,
                                                                      answer.citations[:1])
