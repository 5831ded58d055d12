"""Tests of ``iterlin.experiments``: one file per experiment module, plus the registry and _common.

(A package so that ``tests/experiments/test_ntk.py`` and ``tests/test_ntk.py`` get distinct module
names under pytest's default ``prepend`` import mode.)
"""
