"""$RIRLAB_PLUGINS naming a module that raises, has a syntax error or registers a name twice: one line naming the
module, the error and its line, exit 2 (only ImportError was handled: a traceback)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("code,says", [
    ("x = 1\nraise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here at {name}.py:2"),
    ("def f(:\n", "SyntaxError: "),
    ("from rirlab.models.registry import register\nfrom rirlab.models.rir_grc import RIRGRCConfig, rir_grc\n"
     "register('rir_grc', RIRGRCConfig)(rir_grc)\n", "ValueError: model 'rir_grc' registered twice at {name}.py:3")],
    ids=["raises", "syntax", "twice"])
def test_a_plugin_that_fails_on_import_is_one_line(tmp_path, cli, monkeypatch, code, says):
    name = f"plugin_{tmp_path.name.replace('-', '_').replace('[', '_').replace(']', '')}"
    (tmp_path / f"{name}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("RIRLAB_PLUGINS", name)
    result = cli("models")
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"RIRLAB_PLUGINS module '{name}'" in result.stderr and says.format(name=name) in result.stderr, result.stderr
