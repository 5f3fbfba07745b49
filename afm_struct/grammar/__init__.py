"""Constraint compilation: JSON Schema, regex, Lark and tool grammars to token-mask engines."""
