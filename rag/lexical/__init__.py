"""Lexical (BM25) indexes: one protocol, one file per backend."""
