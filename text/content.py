"""What counts as content in a request string, written so every regex engine reads it alike.

The API strips white space from ids and texts (Python's ``str.strip``), so a string must hold one character
``strip`` keeps, and no NUL (Postgres text cannot hold it). ``\\s`` cannot say this: Python's and pydantic's count
U+001C-U+001F and U+0085 as white space, JSON Schema's (ECMA-262) does not, and a schema-driven client such as
schemathesis then sends "\\x85" as a valid id that the service refuses. The class below lists the characters.
"""

from __future__ import annotations

#: a character that is neither white space (what ``str.strip`` removes) nor NUL
NOT_SPACE = r"[^\x00\t\n\x0b\x0c\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
#: at least one such character and no NUL: a text of spaces or separators is refused by the schema as by the service
HAS_CONTENT = rf"^[^\x00]*{NOT_SPACE}[^\x00]*$"
