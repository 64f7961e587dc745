"""Tokens: loading tokenizers (``tokenizer``; ``PREFIX:NAME`` ones such as test fixtures come from
installed ``sources``), the fast exact encoder (``fast_encoder``) and rendering a request's prompt
as the server does (``rendering``).
"""
