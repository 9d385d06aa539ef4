"""Helpers shared by several test modules (model pairs, statistics); fixtures live in conftest.py."""
