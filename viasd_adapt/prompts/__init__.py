"""Prompts: Spec-Bench's questions and its splits, chat templates, and prompt files.

Torch-free; every command that feeds text to a model takes it from here.
"""
