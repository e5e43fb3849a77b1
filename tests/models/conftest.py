"""The model tests build tiny models: every module of this folder runs on one torch thread (tests/conftest.py)."""

import pytest


@pytest.fixture(autouse=True, scope="module")
def _tiny_models_on_one_thread(one_thread):
    yield
