"""Reading and writing the JSON formats: one-line errors in, atomic files out.

A malformed file is reported by its JSON path (`requests[2].max_tokens`) and
the offending value, never by a traceback. Output files are written to a
temporary file in the same folder and renamed over the target, so a reader
never sees half a file and an interrupted run never clobbers an old one.
"""

from __future__ import annotations

import json
import os
import tempfile
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import SpecError


def read_json(path: str | os.PathLike[str]) -> Any:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(str(p), str(p), "no such file") from None
    except IsADirectoryError:
        raise SpecError(str(p), str(p), "is a folder, not a JSON file") from None
    except UnicodeDecodeError as e:
        raise SpecError(str(p), f"byte {e.start}", "is not UTF-8 text, so not a JSON file") from None
    except OSError as e:
        raise SpecError(str(p), str(p), f"cannot be read: {e.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecError(f"{p}:{e.lineno}:{e.colno}", text[e.pos : e.pos + 20], f"is not valid JSON: {e.msg}") from None


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    write_bytes_atomic(path, (json.dumps(data, indent=1) + "\n").encode())


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        os.fchmod(fd, 0o666 & ~process_umask())  # mkstemp makes 0600; a user's file gets the user's mode
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, p)
    except BaseException:
        os.unlink(tmp)
        raise


def process_alive(pid: int) -> bool:
    """Whether process `pid` still runs: the temporary files and staging folders of one that does not are litter."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, as another user
        return True
    return True


@cache
def process_umask() -> int:
    """The process umask. Reading it means setting it, so once, before any thread could race."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@cache
def schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(resources.files(__package__).joinpath(f"{name}.schema.json").read_text())
    return loaded


def validate(data: Any, schema_name: str, where: str) -> None:
    """Check `data` against a bundled JSON Schema; the first error becomes a SpecError naming its path."""
    validate_with(validator(schema_name), data, where)


@cache
def validator(schema_name: str, definition: str | None = None) -> Any:
    """A strict validator of a bundled schema, or of one of its `$defs` (an engine's answer is one part of a step)."""
    whole = schema(schema_name)
    if definition is None:
        return strict_validator(whole)
    return strict_validator({"$schema": whole["$schema"], "$defs": whole["$defs"], "$ref": f"#/$defs/{definition}"})


def strict_validator(contents: dict[str, Any], **kwargs: Any) -> Any:
    """A Draft 2020-12 validator whose `integer` is Python's `int` only.

    JSON Schema counts `1.0` as an integer. A token count, a block id or a
    step is a count, and the spec's arithmetic on a float is not the spec's:
    `check` reading a trace and the harness reading an engine's answers
    (`spec/answers.py`) must refuse the same values, so both use this.
    `True` is no integer either way (jsonschema already says so).

    jsonschema is imported here, not at the top: only validation needs it, and the spec's modules must also
    import where it is absent (inside a running vLLM, for `schedspec.live`).
    """
    import jsonschema

    checker = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", lambda _, x: type(x) is int)
    strict = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=checker)
    return strict(contents, **kwargs)


def validate_with(validator: Any, data: Any, where: str) -> None:
    """`validate` with a validator built once: a streamed trace checks each of its steps against one."""
    import jsonschema

    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is None:
        return
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    if error.validator == "required":
        missing = next(f for f in error.validator_value if f not in error.instance)
        raise SpecError(f"{where}{path}.{missing}", None, "is required")
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))[0]
        raise SpecError(f"{where}{path}.{extra}", error.instance[extra], "is not a known field")
    why = error.message.split("\n")[0].replace(repr(error.instance), "").strip() or "is invalid"
    if error.validator == "type":  # the value's own type, which its repr does not always show (1.0 or True)
        why = f"is of type {type(error.instance).__name__}, not {error.validator_value!r}"
    elif error.validator in ("anyOf", "oneOf"):  # `new_block_ids`: a list of blocks or null
        why = f"({type(error.instance).__name__}) is none of the forms this field takes"
    raise SpecError(f"{where}{path}", error.instance, why)
