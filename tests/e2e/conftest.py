"""Every test in this folder runs the real `rirlab` CLI through a whole sweep (a real local Ray, a real MLflow store):
all are marked ``e2e``, so ``-m "not e2e"`` (the fast subset of the README) leaves them out."""

from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.e2e)
