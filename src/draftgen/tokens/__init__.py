"""Tokens: loading tokenizers (``tokenizer``, offline ``fixtures``), the fast exact encoder
(``fast_encoder``) and rendering a request's prompt as the server does (``rendering``).
"""
