"""Every import rule of the README's layout table holds, read from the table itself.

The table is the rule ("may import": `spec` imports nothing of ours, the
torch engine only `spec`, ...). Reading it here, rather than restating it,
means the README cannot promise a layering the code does not keep. Every
import of ours is found with `ast`, relative or absolute, at module level or
inside a function: a late import is still a dependency.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("spec", "reference_impl", "gpu_impl", "mutants", "conformance", "proofs", "live", "schedspec")


def allowed_imports() -> dict[str, set[str]]:
    """folder -> the folders it may import, from the README's layout table."""
    rows = re.findall(
        r"^\| `(\w+)/` \| `schedspec[.\w]*` \| [^|]* \| ([^|]*) \|$", (ROOT / "README.md").read_text(), re.M
    )
    allowed: dict[str, set[str]] = {}
    for folder, rule in rows:
        if "nothing of ours" in rule:
            allowed[folder] = set()
        elif "all of the above" in rule:
            allowed[folder] = set(allowed)
        else:
            allowed[folder] = {name for name in re.findall(r"`(\w+)`", rule.split("never")[0]) if name in LAYERS}
    return allowed


def layer_of(module: str) -> str | None:
    """`schedspec.conformance.engines.vllm` -> `conformance`; `schedspec.cli` -> `schedspec`; others None."""
    parts = module.split(".")
    if parts[0] != "schedspec":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS[:-1] else "schedspec"


def imports_of(path: Path, folder: str) -> set[str]:
    """The modules of ours that `path` imports, as absolute `schedspec.*` names."""
    rel = path.relative_to(ROOT / folder).with_suffix("")
    package = ["schedspec"] + ([] if folder == "schedspec" else [folder]) + list(rel.parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                found.add(".".join(base + ([node.module] if node.module else [])))
            elif node.module:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if layer_of(m) is not None}


def test_the_table_names_every_layer():
    assert set(allowed_imports()) == set(LAYERS)
    assert allowed_imports()["spec"] == set() and allowed_imports()["gpu_impl"] == {"spec"}


@pytest.mark.parametrize("folder", LAYERS)
def test_each_layer_imports_only_what_the_readme_allows(folder):
    allowed = allowed_imports()[folder] | {folder}
    broken = sorted(
        f"{path.relative_to(ROOT)} imports {module}"
        for path in (ROOT / folder).rglob("*.py")
        if "vllm_env" not in path.parts
        for module in imports_of(path, folder)
        if layer_of(module) not in allowed
    )
    assert not broken, "\n".join(broken)


def test_the_checker_sees_a_planted_violation():
    """A relative import two levels up, from a nested module, is resolved to its layer and refused."""
    planted = ROOT / "gpu_impl" / "_planted_layer_violation.py"
    planted.write_text("from ..reference_impl import ReferenceEngine\n")
    try:
        assert imports_of(planted, "gpu_impl") == {"schedspec.reference_impl"}
        with pytest.raises(AssertionError, match="imports schedspec.reference_impl"):
            test_each_layer_imports_only_what_the_readme_allows("gpu_impl")
    finally:
        planted.unlink()
    nested = ROOT / "conformance" / "engines" / "vllm.py"
    assert "schedspec.spec.errors" in imports_of(nested, "conformance")
