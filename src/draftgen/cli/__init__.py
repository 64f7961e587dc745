"""The command line: a thin layer over the library. The parser and commands (``main``), the
``draftgen.toml`` file (``config``) and the generated reference (``doc``).
"""
