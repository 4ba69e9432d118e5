"""Ingestion: knowledge files -> :class:`rag.chunk.Document` (metadata + sections in reading order).

Formats: Markdown with YAML front matter (``.md``), HTML (``.html``/``.htm``), FAQ tables
(``.csv`` and ``.jsonl`` with question/answer columns), BEIR ``corpus.jsonl`` (``_id``, ``title``,
``text``), and plain ``.txt``. Markup is reduced to plain text (tables become "cell: cell"
lines) so that an extractive answer quotes readable text. Glossary files (``*.yaml``) are not
documents; :func:`rag.rewrite.load_glossary` reads them.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from rag.chunk import Document, Section, detect_lang

DOC_SUFFIXES = (".md", ".markdown", ".html", ".htm", ".csv", ".jsonl", ".txt")
_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*(?:\n|\Z)", re.S)
_WS = re.compile(r"[ \t\u00a0\u3000]+")


class IngestError(ValueError):
    """A knowledge file that cannot be read; the message names the file."""


def _clean(text: str) -> str:
    lines = [_WS.sub(" ", ln).strip() for ln in text.splitlines()]
    return "\n".join(ln for ln in lines if ln)


def _iso(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    return str(value)


def _mtime(path: Path) -> str:
    return dt.datetime.fromtimestamp(path.stat().st_mtime, tz=dt.timezone.utc).date().isoformat()


class _SectionBuilder:
    """Collects lines under the current heading path; a new heading starts a new section."""

    def __init__(self) -> None:
        self.sections: list[Section] = []
        self.path: list[str] = []          # headings below the title, by level
        self.levels: list[int] = []
        self.lines: list[str] = []
        self.title: str = ""

    def heading(self, level: int, text: str) -> None:
        self.flush()
        text = _clean(text).replace("\n", " ")
        if level == 1 and not self.title and not self.path:
            self.title = text
            return
        while self.levels and self.levels[-1] >= level:
            self.levels.pop()
            self.path.pop()
        self.levels.append(level)
        self.path.append(text)

    def line(self, text: str) -> None:
        text = _clean(text)
        if text:
            self.lines.append(text)

    def flush(self) -> None:
        if self.lines:
            self.sections.append(Section(path=list(self.path), text="\n".join(self.lines)))
        self.lines = []


# --------------------------------------------------------------------------- Markdown


def split_front_matter(raw: str) -> tuple[dict[str, Any], str]:
    m = _FRONT_MATTER.match(raw)
    if not m:
        return {}, raw
    meta = yaml.safe_load(m.group(1)) or {}
    if not isinstance(meta, dict):
        raise ValueError("front matter is not a mapping")
    return meta, raw[m.end():]


def _inline_text(token) -> str:
    out: list[str] = []
    for child in token.children or []:
        if child.type in ("text", "code_inline", "html_inline"):
            out.append(re.sub(r"<[^>]+>", "", child.content) if child.type == "html_inline" else child.content)
        elif child.type == "softbreak":
            out.append("\n")
        elif child.type == "hardbreak":
            out.append("\n")
        elif child.type == "image":
            out.append(child.content or "")
    return "".join(out)


def _table_lines(rows: list[list[str]], header: list[str]) -> list[str]:
    lines = []
    for cells in rows:
        cells = [c.strip() for c in cells]
        if not any(cells):
            continue
        if len(cells) == 1:
            lines.append(cells[0])
        elif len(cells) == 2 or not header:
            lines.append(f"{cells[0]}: " + ", ".join(c for c in cells[1:] if c))
        else:
            rest = "; ".join(f"{h}: {c}" for h, c in zip(header[1:], cells[1:], strict=False) if c)
            lines.append(f"{cells[0]}: {rest}")
    return lines


def parse_markdown(raw: str, *, doc_id: str, path: str = "", default_source: str = "") -> Document:
    from markdown_it import MarkdownIt

    try:
        meta, body = split_front_matter(raw)
    except (yaml.YAMLError, ValueError) as exc:
        raise IngestError(f"{path or doc_id}: bad front matter: {exc}") from exc
    md = MarkdownIt("commonmark").enable("table")
    tokens = md.parse(body)
    b = _SectionBuilder()
    header: list[str] = []
    rows: list[list[str]] = []
    row: list[str] | None = None
    in_head = False
    number = ""          # the marker of the ordered list item whose first line comes next ("1.")
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.type == "list_item_open" and t.info:
            number = f"{t.info}{t.markup}"       # a step keeps its number: order matters for steps
        if t.type == "heading_open":
            b.heading(int(t.tag[1:]), _inline_text(tokens[i + 1]))
            i += 3
            continue
        if t.type == "table_open":
            header, rows = [], []
        elif t.type == "thead_open":
            in_head = True
        elif t.type == "thead_close":
            in_head = False
        elif t.type == "tr_open":
            row = []
        elif t.type in ("th_open", "td_open"):
            if row is not None:
                row.append(_inline_text(tokens[i + 1]))
        elif t.type == "tr_close":
            if row is not None:
                (header.extend(row) if in_head else rows.append(row))
            row = None
        elif t.type == "table_close":
            for ln in _table_lines(rows, header):
                b.line(ln)
        elif t.type == "inline" and row is None:
            text = _inline_text(t)
            b.line(f"{number} {text}" if number and text.strip() else text)
            number = ""
        elif t.type in ("fence", "code_block"):
            for ln in t.content.splitlines():
                b.line(ln)
        elif t.type == "html_block":
            b.line(re.sub(r"<[^>]+>", " ", t.content))
        i += 1
    b.flush()
    title = str(meta.get("title") or b.title or doc_id)
    return Document(
        doc_id=str(meta.get("id") or doc_id),
        title=title,
        sections=b.sections,
        lang=str(meta.get("lang") or meta.get("language") or ""),
        category=str(meta.get("category") or ""),
        source=str(meta.get("source") or default_source),
        updated_at=_iso(meta.get("updated_at") or meta.get("updated") or meta.get("date")),
        path=path,
        keywords=keywords_of(meta.get("keywords")),
    )


_KEYWORD_SEP = re.compile(r"[,，、;；\n]")


def keywords_of(value: Any) -> tuple[str, ...]:
    """An article's keywords: a YAML list, or one string separated by commas (either width), 、 or semicolons."""
    if value is None:
        return ()
    items = value if isinstance(value, (list, tuple)) else _KEYWORD_SEP.split(str(value))
    return tuple(dict.fromkeys(_WS.sub(" ", str(k)).strip() for k in items if k is not None and str(k).strip()))


# --------------------------------------------------------------------------- HTML

_SKIP = {"script", "style", "nav", "header", "footer", "noscript", "template", "svg", "form", "button"}
_BLOCK = {"p", "div", "li", "dt", "dd", "pre", "blockquote", "section", "article", "main", "ul", "ol", "dl",
          "table", "figcaption", "br", "hr", "tr", "body", "aside", "details", "summary"}


def parse_html(raw: str, *, doc_id: str, path: str = "", default_source: str = "") -> Document:
    import lxml.html

    try:
        root = lxml.html.document_fromstring(raw)
    except Exception as exc:  # lxml raises several types (ParserError, ValueError) on empty/broken input
        raise IngestError(f"{path or doc_id}: not HTML: {exc}") from exc
    metas = {
        (m.get("name") or m.get("property") or "").lower(): m.get("content") or ""
        for m in root.iter("meta")
    }
    b = _SectionBuilder()
    buf: list[str] = []

    def flush_buf() -> None:
        if buf:
            b.line("".join(buf))
            buf.clear()

    def walk(el) -> None:
        tag = el.tag if isinstance(el.tag, str) else ""
        tag = tag.lower()
        if tag in _SKIP or tag in ("head", "title"):
            return
        if re.fullmatch(r"h[1-6]", tag):
            flush_buf()
            b.heading(int(tag[1]), el.text_content())
            return
        if tag == "tr":
            flush_buf()
            cells = [c.text_content() for c in el if isinstance(c.tag, str) and c.tag.lower() in ("td", "th")]
            for ln in _table_lines([cells], []):
                b.line(ln)
            return
        if tag in _BLOCK:
            flush_buf()
        if el.text:
            buf.append(el.text)
        for child in el:
            walk(child)
            if child.tail:
                buf.append(child.tail)
        if tag in _BLOCK:
            flush_buf()

    body = root.find("body")
    walk(body if body is not None else root)
    flush_buf()
    b.flush()
    title_el = root.find(".//title")
    title = (metas.get("title") or (title_el.text_content().strip() if title_el is not None else "")
             or b.title or doc_id)
    if b.title and b.title != title and b.sections and not b.sections[0].path:
        pass
    return Document(
        doc_id=metas.get("id") or metas.get("doc-id") or doc_id,
        title=_clean(title).replace("\n", " "),
        sections=b.sections,
        lang=(root.get("lang") or metas.get("language") or "").split("-")[0].lower(),
        category=metas.get("category") or "",
        source=metas.get("source") or default_source,
        updated_at=metas.get("updated_at") or metas.get("article:modified_time") or None,
        path=path,
        keywords=keywords_of(metas.get("keywords")),
    )


# --------------------------------------------------------------------------- FAQ tables and BEIR

_Q_KEYS = ("question", "q", "title", "问题")
_A_KEYS = ("answer", "a", "text", "答案")


def _pick(row: dict[str, Any], keys: Iterable[str]) -> str:
    lowered = {str(k).strip().lower(): v for k, v in row.items() if k is not None}
    for k in keys:
        v = lowered.get(k)
        if v not in (None, ""):
            return str(v)
    return ""


def faq_document(row: dict[str, Any], *, default_id: str, path: str = "", default_source: str = "") -> Document:
    question, answer = _pick(row, _Q_KEYS).strip(), _pick(row, _A_KEYS).strip()
    if not answer:
        raise IngestError(f"{path}: FAQ entry {default_id} has no answer")
    return Document(
        doc_id=_pick(row, ("id", "_id", "doc_id")) or default_id,
        title=_clean(question).replace("\n", " "),
        sections=[Section(path=[], text=_clean(answer))],
        lang=_pick(row, ("lang", "language")),
        category=_pick(row, ("category",)),
        source=_pick(row, ("source", "url")) or default_source,
        updated_at=_pick(row, ("updated_at", "updated")) or None,
        path=path,
        keywords=keywords_of(next((v for k, v in row.items() if str(k).strip().lower() == "keywords"), None)),
    )


def beir_document(obj: dict[str, Any], *, source: str = "") -> Document:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return Document(
        doc_id=str(obj["_id"]),
        title=_clean(str(obj.get("title") or "")).replace("\n", " "),
        sections=[Section(path=[], text=_clean(str(obj.get("text") or "")))],
        lang=str(meta.get("lang") or ""),
        category=str(meta.get("category") or ""),
        source=str(meta.get("source") or meta.get("url") or source),
        path=source,
    )


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, encoding="utf-8-sig") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise IngestError(f"{path}:{n}: not JSON: {exc.msg}") from exc
            if not isinstance(obj, dict):
                raise IngestError(f"{path}:{n}: expected a JSON object")
            yield n, obj


# --------------------------------------------------------------------------- files and folders


def load_file(path: Path, *, root: Path | None = None) -> Iterator[Document]:
    """Documents in one file (one for Markdown/HTML/text, one per row for FAQ tables and BEIR)."""
    path = Path(path)
    rel = path.relative_to(root).as_posix() if root and path.is_relative_to(root) else path.name
    stem = rel.rsplit(".", 1)[0].replace("/", "-")
    suffix = path.suffix.lower()
    try:
        if suffix in (".md", ".markdown", ".html", ".htm", ".txt"):
            raw = path.read_text(encoding="utf-8-sig")
            if suffix in (".md", ".markdown"):
                doc = parse_markdown(raw, doc_id=stem, path=str(path), default_source=rel)
            elif suffix == ".txt":
                meta, body = split_front_matter(raw)
                doc = parse_markdown(raw, doc_id=stem, path=str(path), default_source=rel) if meta else Document(
                    doc_id=stem, title=stem, sections=[Section([], _clean(body))], source=rel, path=str(path))
            else:
                doc = parse_html(raw, doc_id=stem, path=str(path), default_source=rel)
            doc.updated_at = doc.updated_at or _mtime(path)
            yield doc
        elif suffix == ".csv":
            text = path.read_text(encoding="utf-8-sig")
            reader = csv.DictReader(io.StringIO(text))
            if not reader.fieldnames or not ({f.strip().lower() for f in reader.fieldnames} & set(_A_KEYS)):
                raise IngestError(f"{path}: a FAQ CSV needs a header with question and answer columns")
            for n, row in enumerate(reader, 1):
                yield faq_document(row, default_id=f"{stem}-{n}", path=str(path), default_source=rel)
        elif suffix == ".jsonl":
            for n, obj in read_jsonl(path):
                if "_id" in obj and "question" not in obj:
                    yield beir_document(obj, source=rel)
                else:
                    yield faq_document(obj, default_id=f"{stem}-{n}", path=str(path), default_source=rel)
        else:
            raise IngestError(f"{path}: unsupported file type {suffix!r} (use {', '.join(DOC_SUFFIXES)})")
    except UnicodeDecodeError as exc:
        raise IngestError(f"{path}: not UTF-8 text") from exc
    except csv.Error as exc:
        raise IngestError(f"{path}: bad CSV: {exc}") from exc


def iter_files(source: Path) -> list[Path]:
    """Knowledge files under ``source`` in a stable order (hidden files and folders skipped)."""
    source = Path(source)
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise IngestError(f"{source}: no such file or folder")
    files = [
        p for p in source.rglob("*")
        if p.is_file() and p.suffix.lower() in DOC_SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(source).parts)
    ]
    return sorted(files)


def load_documents(source: Path) -> list[Document]:
    """Every document under ``source``; doc ids must be unique; languages are filled in when missing."""
    source = Path(source)
    root = source if source.is_dir() else source.parent
    docs: list[Document] = []
    seen: dict[str, str] = {}
    for path in iter_files(source):
        for doc in load_file(path, root=root):
            if doc.doc_id in seen:
                raise IngestError(f"doc id {doc.doc_id!r} appears twice: {seen[doc.doc_id]} and {path}")
            seen[doc.doc_id] = str(path)
            if not doc.lang:
                doc.lang = detect_lang(doc.title + "\n" + doc.text)
            docs.append(doc)
    return docs
