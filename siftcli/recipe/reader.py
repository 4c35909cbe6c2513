"""YAML text in, a checked dict out: the bounded YAML reader (size, depth, aliases, expansion), --set overrides, and
loading a recipe file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from siftcli.errors import SiftcliError
from siftcli.recipe.schema import Recipe, validate_recipe


class YamlSyntaxError(SiftcliError):
    """Text that is not YAML at all (``--set`` then takes it as a plain string); every other refusal stays an error."""


def default_recipe_path() -> Path:
    """``recipes/default.yaml`` from a source checkout, or the copy installed as package data."""
    root = Path(__file__).resolve().parent.parent  # siftcli/
    for candidate in (root.parent / "recipes" / "default.yaml", root / "recipes" / "default.yaml"):
        if candidate.exists():
            return candidate
    raise SiftcliError("the embedded default recipe is missing from this installation; pass a recipe file")


def load_recipe(path: str | Path | None, overrides: list[str] | None = None) -> Recipe:
    """Read, override and validate a recipe; every problem is one :class:`SiftcliError` line."""
    path = Path(path) if path is not None else default_recipe_path()
    raw = read_yaml(path)
    for item in overrides or []:
        apply_override(raw, item)
    return validate_recipe(raw, str(path))


MAX_RECIPE_BYTES = 1_000_000


MAX_YAML_DEPTH = 64


MAX_YAML_ALIASES = 100


MAX_YAML_NODES = 100_000  # values after every alias is expanded: a recipe has a few hundred


MAX_YAML_CHARS = 2_000_000  # characters of scalars after expansion


MAX_INT_DIGITS = 100


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where PyYAML was built with it: the same YAML, faster


def read_yaml(path: Path) -> dict[str, Any]:
    """Read a recipe; bounded in size, nesting, aliases and what they expand to, so no input can hang or exhaust memory."""
    if not path.exists():
        broken = " (a broken or looping symbolic link)" if path.is_symlink() else ""
        raise SiftcliError(f"{path}: recipe file not found{broken}")
    if path.is_dir():
        raise SiftcliError(f"{path}: is a folder; expected a recipe .yaml file")
    if not path.is_file():  # a FIFO or device would block or never end
        raise SiftcliError(f"{path}: is not a regular file; expected a recipe .yaml file")
    if path.stat().st_size > MAX_RECIPE_BYTES:
        raise SiftcliError(f"{path}: {path.stat().st_size} bytes; a recipe is at most {MAX_RECIPE_BYTES} bytes")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SiftcliError(f"{path}: cannot read recipe ({exc.__class__.__name__}: {exc})") from None
    data = load_yaml_text(text, str(path))
    if data is None:
        raise SiftcliError(f"{path}: recipe is empty; expected a mapping of keys such as model, data, sift")
    if not isinstance(data, dict):
        raise SiftcliError(f"{path}: recipe must be a mapping of keys, got a {type(data).__name__}")
    return data


def load_yaml_text(text: str, where: str) -> Any:
    """Parse YAML from a recipe or a ``--set`` value, refused (one line naming ``where``) before anything is built when
    it nests too deep, uses too many aliases, repeats a key, or would expand past :data:`MAX_YAML_NODES` values or
    :data:`MAX_YAML_CHARS` characters: the expanded size is counted on the composed graph, where an alias is a shared
    node, so a tree of nine aliases nine deep is refused in microseconds instead of built."""
    if len(text) > MAX_RECIPE_BYTES:
        raise SiftcliError(f"{where}: {len(text)} characters; at most {MAX_RECIPE_BYTES}")
    try:
        _check_yaml_shape(text, where)
        loader = _LOADER(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_expansion(node, where)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise YamlSyntaxError(f"{where}: YAML syntax error{at}: {problem}") from None
    except (ValueError, RecursionError) as exc:  # e.g. Python's limit on converting long digit strings
        raise SiftcliError(f"{where}: a value cannot be read ({str(exc).splitlines()[0][:120]})") from None


def _check_expansion(root: yaml.Node, where: str) -> None:
    """Count what ``root`` expands to (each node once, memoised: aliases share nodes) and refuse duplicate keys and
    absurd integers, without recursion."""
    size: dict[int, tuple[int, int]] = {}
    open_: set[int] = set()  # collections whose children are being counted: meeting one again is a cycle
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in size:
            continue
        if not children_done and id(node) in open_:
            raise SiftcliError(f"{where}: line {node.start_mark.line + 1}: a value that contains itself (a recursive alias)")
        if isinstance(node, yaml.ScalarNode):
            if node.tag.endswith(":int") and len(node.value.lstrip("+-").replace("_", "")) > MAX_INT_DIGITS:
                raise SiftcliError(f"{where}: line {node.start_mark.line + 1}: an integer of {len(node.value)} digits; "
                                   f"expected a number of at most {MAX_INT_DIGITS} digits")
            size[id(node)] = (1, len(node.value))
            continue
        kids = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else list(node.value)
        if not children_done:
            if isinstance(node, yaml.MappingNode):
                seen: set[str] = set()
                for key, _ in node.value:
                    if isinstance(key, yaml.ScalarNode):
                        if key.value in seen and key.value != "<<":
                            raise SiftcliError(f"{where}: line {key.start_mark.line + 1}: key {key.value!r} is given twice; "
                                               "write each key once")
                        seen.add(key.value)
            open_.add(id(node))
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in size)
            continue
        open_.discard(id(node))
        nodes = 1 + sum(size[id(k)][0] for k in kids)
        chars = sum(size[id(k)][1] for k in kids)
        if nodes > MAX_YAML_NODES or chars > MAX_YAML_CHARS:
            raise SiftcliError(f"{where}: line {node.start_mark.line + 1}: expands to more than {MAX_YAML_NODES:,} values or "
                               f"{MAX_YAML_CHARS:,} characters once its aliases are written out; a recipe is a few hundred")
        size[id(node)] = (nodes, chars)


def _check_yaml_shape(text: str, where: str) -> None:
    """Walk the YAML event stream (no recursion) and refuse deep nesting and many aliases before composing anything.

    libyaml (bundled with PyYAML 6.0.4 and later) has its own nesting limit, which its scanner can hit while reading
    ahead, before the parser hands over the event that would cross ours; that is the same refusal, not a syntax error
    (which ``--set`` would take as a plain string)."""
    try:
        _walk_yaml_events(text, where)
    except yaml.YAMLError as exc:
        if "nesting depth" in str(getattr(exc, "problem", "") or ""):
            raise _too_deep(where) from None
        raise


def _too_deep(where: str) -> SiftcliError:
    return SiftcliError(f"{where}: nested more than {MAX_YAML_DEPTH} levels deep; a recipe is a few levels of keys")


def _walk_yaml_events(text: str, where: str) -> None:
    depth = aliases = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise _too_deep(where)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_YAML_ALIASES:
                raise SiftcliError(f"{where}: more than {MAX_YAML_ALIASES} YAML aliases (*name); write the values out")


def apply_override(raw: dict[str, Any], item: str) -> None:
    """``key.sub=value`` with value parsed as YAML (so numbers, booleans and lists work)."""
    if "=" not in item:
        raise SiftcliError(f"--set {item!r}: expected key.sub=value")
    key, _, value = item.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise SiftcliError(f"--set {item!r}: empty key")
    try:
        parsed = load_yaml_text(value, f"--set {key.strip()}") if value.strip() else None
    except YamlSyntaxError:  # a value too large, too deep or repeating a key stays refused, never taken as a string
        parsed = value
    node = raw
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise SiftcliError(f"--set {item!r}: {part!r} is not a section")
        node = child
    node[parts[-1]] = parsed
