"""Load YAML keeping the line of every mapping key, so errors can say file:line.

Hostile files end in one line too: a directory, bytes that are not UTF-8, a key given twice in one mapping
(YAML would keep the last silently), and aliases that expand to more nodes than any spec needs (an alias
bomb is refused from the composed node graph, before anything is expanded into Python objects).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from rirlab.errors import UserError

MAX_NODES = 100_000  # YAML nodes a spec may expand to (aliases counted as copies); real specs have a few hundred


def _expanded_size(root) -> int:
    """Nodes of the document with every alias expanded, counted without expanding (memoised per node);
    UserError once it passes MAX_NODES or on an alias that contains itself."""
    sizes: dict[int, int] = {}
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes and not done:
            if sizes[id(node)] < 0:
                raise UserError("an alias refers to a node that contains it (a recursive alias)")
            continue
        children = [c for kv in node.value for c in (kv if isinstance(kv, tuple) else (kv,))] \
            if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) else []
        if done:
            sizes[id(node)] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[id(node)] > MAX_NODES:
                raise UserError(f"it expands to more than {MAX_NODES:,} YAML values (through its aliases)")
            continue
        sizes[id(node)] = -1  # in progress
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes or sizes[id(c)] < 0)
    return sizes[id(root)]


def _walk(node, path: tuple, lines: dict, where: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict = {}
        for k, v in node.value:
            if k.value in seen and k.value != "<<":
                raise UserError(f"{where}:{k.start_mark.line + 1}: key '{k.value}' is given twice in the same mapping "
                                f"(first at line {seen[k.value]}); YAML would keep only the last: merge them into one")
            seen[k.value] = k.start_mark.line + 1
            key = (*path, k.value)
            lines[key] = k.start_mark.line + 1
            _walk(v, key, lines, where)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            key = (*path, i)
            lines[key] = v.start_mark.line + 1
            _walk(v, key, lines, where)


def load_with_lines(path: Path) -> tuple[dict, dict]:
    """(data, {key path tuple: line number}); a missing file or bad YAML is a one-line UserError."""
    if path.is_dir():
        raise UserError(f"{path} is a directory, not a spec file; pass the path of a YAML spec inside it, "
                        f"e.g. search_spaces/chunk_beam.yaml")
    if not path.is_file():
        raise UserError(f"spec file not found: {path} (pass the path of a YAML spec, e.g. search_spaces/chunk_beam.yaml)")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[err.start]:02x}); save the spec as UTF-8") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None:
            try:
                _expanded_size(node)
            except UserError as err:
                raise UserError(f"{path}: {err}; write the values out instead of nesting aliases") from None
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(f"{where}: invalid YAML: {problem}; fix the syntax at that line") from None
    except RecursionError:
        raise UserError(f"{path}: nested too deeply to be a spec; flatten it") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a spec must be a YAML mapping (name:, task:, model:, search: ...)")
    lines: dict = {}
    _walk(node, (), lines, str(path))
    return data, lines
