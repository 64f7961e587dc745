"""Model code that test fixtures ship in their tokenizer directories (chat encoders, remote code).

Each module is standalone: a fixture copies its file as it is, and loaders import it from there.
"""
