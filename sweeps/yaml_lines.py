"""Load YAML keeping the line of every mapping key, so errors can say file:line."""

from __future__ import annotations

from pathlib import Path

import yaml

from rirlab.errors import UserError


def _walk(node, path: tuple, lines: dict) -> None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = (*path, k.value)
            lines[key] = k.start_mark.line + 1
            _walk(v, key, lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            key = (*path, i)
            lines[key] = v.start_mark.line + 1
            _walk(v, key, lines)


def load_with_lines(path: Path) -> tuple[dict, dict]:
    """(data, {key path tuple: line number}); a missing file or bad YAML is a one-line UserError."""
    if not path.is_file():
        raise UserError(f"spec file not found: {path} (pass the path of a YAML spec, e.g. search_spaces/chunk_beam.yaml)")
    text = path.read_text()
    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(f"{where}: invalid YAML: {problem}; fix the syntax at that line") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a spec must be a YAML mapping (name:, task:, model:, search: ...)")
    lines: dict = {}
    _walk(node, (), lines)
    return data, lines
