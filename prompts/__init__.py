"""Prompt templates as files, and few-shot examples that are themselves valid candidates."""
