"""Every import rule of the layer table in docs/architecture.md holds, read from the table itself.

The table is the rule ("may import": `spec` imports nothing of ours, the
torch engine only `spec`, ...). Reading it here, rather than restating it,
means the architecture page cannot promise a layering the code does not keep.
The README's short layout table lists the same folders. Every
import of ours is found with `ast`, relative or absolute, at module level or
inside a function: a late import is still a dependency.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
LAYERS = ("spec", "reference_impl", "gpu_impl", "mutants", "conformance", "proofs", "live", "schedspec")


def allowed_imports() -> dict[str, set[str]]:
    """folder -> the folders it may import, from the layer table of docs/architecture.md."""
    rows = re.findall(r"^\| `(\w+)/` \| `schedspec[.\w]*` \| [^|]* \| ([^|]*) \|$", ARCHITECTURE.read_text(), re.M)
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


def imports_of(path: Path, folder: str, package: list[str] | None = None) -> set[str]:
    """The modules of ours that `path` imports, as absolute `schedspec.*` names.

    `package` is the module's package as a list of names (by default, from
    where `path` lies under `folder`): a planted file elsewhere says where it
    would live.
    """
    if package is None:
        rel = path.relative_to(ROOT / folder).with_suffix("")
        package = ["schedspec"] + ([] if folder == "schedspec" else [folder]) + list(rel.parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                if node.module:
                    found.add(".".join(base + [node.module]))
                else:  # `from . import x`: each name is a module of that package
                    found.update(".".join(base + [alias.name]) for alias in node.names)
            elif node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if layer_of(m) is not None}


def layer_violations(folder: str, imported: dict[str, set[str]]) -> list[str]:
    allowed = allowed_imports()[folder] | {folder}
    return sorted(
        f"{where} imports {m}" for where, mods in imported.items() for m in mods if layer_of(m) not in allowed
    )


def sources(folder: str) -> list[Path]:
    return [p for p in (ROOT / folder).rglob("*.py") if "vllm_env" not in p.parts]


def test_the_table_names_every_layer():
    assert set(allowed_imports()) == set(LAYERS)
    assert allowed_imports()["spec"] == set() and allowed_imports()["gpu_impl"] == {"spec"}


def test_the_readme_lists_the_same_folders():
    rows = re.findall(r"^\| `(\w+)/` \| [^|]* \|$", (ROOT / "README.md").read_text(), re.M)
    assert set(LAYERS) <= set(rows), f"the README's layout table lacks {set(LAYERS) - set(rows)}"


@pytest.mark.parametrize("folder", LAYERS)
def test_each_layer_imports_only_what_the_readme_allows(folder):
    broken = layer_violations(folder, {str(p.relative_to(ROOT)): imports_of(p, folder) for p in sources(folder)})
    assert not broken, "\n".join(broken)


def test_the_checker_sees_a_planted_violation(tmp_path):
    """A relative import two levels up, from a nested module, is resolved to its layer and refused."""
    planted = tmp_path / "planted.py"
    planted.write_text("from ..reference_impl import ReferenceEngine\n")
    found = imports_of(planted, "gpu_impl", ["schedspec", "gpu_impl"])
    assert found == {"schedspec.reference_impl"}
    assert layer_violations("gpu_impl", {"gpu_impl/planted.py": found}) == [
        "gpu_impl/planted.py imports schedspec.reference_impl"
    ]
    nested = ROOT / "conformance" / "engines" / "vllm.py"
    assert "schedspec.spec.errors" in imports_of(nested, "conformance")


# ---- the rooms of conformance/: the table in its package docstring, one tested copy -------------------------


def room_rules() -> dict[str, set[str]]:
    """room -> the rooms it may import, from the table in conformance/__init__.py."""
    doc = ast.get_docstring(ast.parse((ROOT / "conformance" / "__init__.py").read_text())) or ""
    rows = re.findall(r"^\| `(\w+)/` \| [^|]* \| ([^|]*) \|$", doc, re.M)
    return {room: set() if "no room" in rule else set(re.findall(r"`(\w+)`", rule)) for room, rule in rows}


ROOMS = sorted(p.parent.name for p in (ROOT / "conformance").glob("*/__init__.py"))


def room_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["schedspec", "conformance"] and parts[2] in ROOMS else None


def room_violations(room: str, imported: dict[str, set[str]]) -> list[str]:
    allowed = room_rules()[room] | {room}
    return sorted(
        f"{where} imports {m}" for where, mods in imported.items() for m in mods if room_of(m) not in allowed | {None}
    )


def test_conformance_is_rooms_and_the_table_names_each():
    assert set(room_rules()) == set(ROOMS)
    flat = sorted(p.name for p in (ROOT / "conformance").glob("*.py") if p.name != "__init__.py")
    assert not flat, f"modules outside a room: {flat}"
    for room in ROOMS:  # each room says what it holds
        assert ast.get_docstring(ast.parse((ROOT / "conformance" / room / "__init__.py").read_text()))


@pytest.mark.parametrize("room", ROOMS)
def test_each_room_imports_only_the_rooms_its_row_allows(room):
    paths = (ROOT / "conformance" / room).glob("*.py")
    broken = room_violations(room, {str(p.relative_to(ROOT)): imports_of(p, "conformance") for p in paths})
    assert not broken, "\n".join(broken)


def test_the_room_check_sees_a_planted_violation(tmp_path):
    """The workloads may import no room: a lazy import of the differ, from inside a function, is refused."""
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from ..harness.differ import diff\n")
    found = imports_of(planted, "conformance", ["schedspec", "conformance", "workloads"])
    assert room_violations("workloads", {"conformance/workloads/planted.py": found}) == [
        "conformance/workloads/planted.py imports schedspec.conformance.harness.differ"
    ]


# ---- the command line apart from the library: nothing outside schedspec/cli imports it --------------------------


def cli_importers(imported: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{where} imports {m}" for where, mods in imported.items() for m in mods if m.startswith("schedspec.cli")
    )


def test_nothing_outside_the_cli_imports_it():
    imported = {
        str(p.relative_to(ROOT)): imports_of(p, folder)
        for folder in LAYERS
        for p in sources(folder)
        if not p.is_relative_to(ROOT / "schedspec" / "cli")
    }
    assert not cli_importers(imported), "\n".join(cli_importers(imported))
    for room in ("cli", "render"):  # each room says what it holds and may import
        doc = ast.get_docstring(ast.parse((ROOT / "schedspec" / room / "__init__.py").read_text())) or ""
        assert "tests/unit/project/test_layers.py" in doc, (
            f"schedspec/{room}/__init__.py does not state its import rule"
        )


def test_the_cli_check_sees_a_planted_import(tmp_path):
    """A library module that borrows a command's helper, lazily, is refused."""
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from .cli.certify import CampaignProgress\n")
    found = imports_of(planted, "schedspec", ["schedspec"])
    assert cli_importers({"schedspec/planted.py": found}) == ["schedspec/planted.py imports schedspec.cli.certify"]


# ---- no import cycle between the modules of one package, not even a lazy or TYPE_CHECKING one ----------------


def package_graph(folder: Path, package: list[str]) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports (every import, wherever it stands)."""
    modules = {p.stem: p for p in folder.glob("*.py") if p.stem != "__init__"}
    prefix = ".".join(package) + "."
    graph = {}
    for name, path in modules.items():
        found = imports_of(path, "", package) if folder != ROOT else set()
        graph[name] = {m[len(prefix) :].split(".")[0] for m in found if m.startswith(prefix)} & set(modules) - {name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph`, as the modules around it, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state and (found := visit(m)):
                return found
        state[n] = 2
        stack.pop()
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def packages() -> list[tuple[Path, list[str]]]:
    out = []
    for layer in LAYERS:
        for init in (ROOT / layer).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / layer).parts
            out.append((init.parent, ["schedspec"] + ([] if layer == "schedspec" else [layer]) + list(rel)))
    return out


@pytest.mark.parametrize("folder, package", packages(), ids=lambda x: ".".join(x) if isinstance(x, list) else "")
def test_no_import_cycle_inside_a_package(folder, package):
    found = cycle(package_graph(folder, package))
    assert found is None, " -> ".join(found or [])


def test_the_cycle_check_sees_a_planted_cycle_hidden_behind_type_checking(tmp_path):
    (tmp_path / "a.py").write_text("from .b import x\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import y\n")
    (tmp_path / "c.py").write_text("def f():\n    from . import a\n")
    assert cycle(package_graph(tmp_path, ["schedspec", "pkg"])) == ["a", "b", "a"]


def test_the_architecture_page_shows_the_same_room_rules():
    """docs/architecture.md repeats the room table for readers; the copy in conformance/__init__.py rules."""
    page = (ROOT / "docs" / "architecture.md").read_text().split("### The rooms of `conformance/`", 1)[1]
    rows = re.findall(r"^\| `(\w+)/` \| [^|]* \| ([^|]*) \|$", page.split("\n\n", 3)[2], re.M)
    shown = {room: set() if "no room" in rule else set(re.findall(r"`(\w+)`", rule)) for room, rule in rows}
    assert shown == room_rules()


# ---- no private name crosses a module boundary -----------------------------------------------------------------


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(path: Path) -> list[str]:
    """`from <ours> import _name`, or `module._name` on a module of ours, in `path`: a name kept private, taken."""
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    tree = ast.parse(path.read_text(), str(path))
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("schedspec")):
            found += [
                f"{where}, line {node.lineno}: imports {'.' * node.level}{node.module or ''}.{a.name}"
                for a in node.names
                if private(a.name)
            ]
            modules |= {a.asname or a.name for a in node.names if a.name.islower()}  # a module, or a function
        elif isinstance(node, ast.Import):
            modules |= {a.asname for a in node.names if a.name.startswith("schedspec") and a.asname}
    found += [
        f"{where}, line {node.lineno}: uses {node.value.id}.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        if node.value.id in modules and private(node.attr)
    ]
    return found


def test_no_private_name_crosses_a_module_boundary():
    """A name another module needs is public, and its module's docstring says so; tests and benchmarks too."""
    folders = [*LAYERS, "tests", "benchmarks", "examples"]
    broken = [hit for folder in folders for p in sorted((ROOT / folder).rglob("*.py")) for hit in private_imports(p)]
    assert not broken, "\n".join(broken)


def test_the_private_name_check_sees_a_planted_import(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from . import differ\n\n\ndef f():\n    from .differ import _helper, public\n    differ._run()\n"
    )
    assert private_imports(planted) == [
        "planted.py, line 5: imports .differ._helper",
        "planted.py, line 6: uses differ._run",
    ]


# ---- tests/unit mirrors the source: a folder per layer, and per room of conformance/ -----------------------------

UNIT = ROOT / "tests" / "unit"


def misplaced_unit_tests(unit: Path) -> list[str]:
    """Test files of tests/unit outside a folder named after a layer, a room of conformance/, or `project`."""
    allowed = {*LAYERS, "project"} | {f"conformance/{room}" for room in ROOMS}
    return sorted(
        str(p.relative_to(unit))
        for p in unit.rglob("test_*.py")
        if p.parent.relative_to(unit).as_posix() not in allowed - {"conformance"}
    )


def test_the_unit_tests_mirror_the_rooms():
    assert not misplaced_unit_tests(UNIT), "move them into the folder of their room: " + ", ".join(
        misplaced_unit_tests(UNIT)
    )


def test_the_mirror_check_sees_a_planted_misplaced_test(tmp_path):
    for where in ("spec", "conformance/harness", "conformance", "", "conformance/nowhere"):
        (tmp_path / where).mkdir(parents=True, exist_ok=True)
        (tmp_path / where / f"test_{where.replace('/', '_') or 'top'}.py").write_text("")
    assert misplaced_unit_tests(tmp_path) == [
        "conformance/nowhere/test_conformance_nowhere.py",
        "conformance/test_conformance.py",
        "test_top.py",
    ]
