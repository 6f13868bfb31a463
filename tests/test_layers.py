"""Layers that point one way (docs/design.md, "Layers"): a reviewer checks logs, scores and RCPs
on a machine without the training stack; one MLLOG reader; the CLI imports a command's
modules only when that command runs; the reference builds its model from a torch-free spec."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = "torch blocked for this test"
ROUND, SUBMITTER, SYSTEM = "v5.0", "GigaComputing", "G893-SD1_hugectr"


def _harness(args: list[str], *, block_torch: Path | None, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m harness ARGS`` in a fresh interpreter; with ``block_torch``, a package of that
    folder named ``torch`` comes first on the path and raises ImportError when imported."""
    env = dict(os.environ)
    path = [str(ROOT)] + ([p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PYTHONPATH"] = os.pathsep.join(([str(block_torch)] if block_torch else []) + path)
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env=env, check=False)


@pytest.fixture(scope="module")
def torch_block(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("block")
    (where / "torch").mkdir()
    (where / "torch" / "__init__.py").write_text(f"raise ImportError({BLOCKED!r})\n")
    return where


@pytest.fixture(scope="module")
def results(shared_logs, tmp_path_factory) -> Path:
    """A copy of one real round (a package, its run set, its logs), and a log made malformed."""
    root = tmp_path_factory.mktemp("results")
    shutil.copytree(shared_logs / ROUND / SUBMITTER, root / ROUND / SUBMITTER)
    run_set = root / ROUND / SUBMITTER / "results" / SYSTEM / "dlrm_dcnv2"
    broken = root / "broken" / "result_0.txt"
    broken.parent.mkdir()
    broken.write_bytes((run_set / "result_0.txt").read_bytes() + b':::MLLOG {"key": broken\n')
    return root


def test_the_block_really_blocks_torch(torch_block, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(torch_block))
    proc = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, check=False)
    assert proc.returncode != 0 and BLOCKED in proc.stderr


@pytest.mark.parametrize("command", ["check log", "check broken log", "check run set", "check package",
                                     "rcp check", "leaderboard", "check missing"])
def test_reviewer_commands_run_without_torch_and_say_the_same(command, torch_block, results, tmp_path):
    package = results / ROUND / SUBMITTER
    run_set = package / "results" / SYSTEM / "dlrm_dcnv2"
    args = {
        "check log": ["check", str(run_set / "result_0.txt")],
        "check broken log": ["check", str(results / "broken" / "result_0.txt")],
        "check run set": ["check", str(run_set)],
        "check package": ["check", str(package), "--json"],
        "rcp check": ["rcp", "check", str(run_set)],
        "leaderboard": ["leaderboard", str(results / ROUND), "-o", str(tmp_path / "site")],
        "check missing": ["check", str(results / "no-such-log.txt")],
    }[command]
    expected_code = {"check broken log": 1, "check missing": 2}.get(command, 0)
    with_torch = _harness(args, block_torch=None, cwd=tmp_path)
    assert with_torch.returncode == expected_code, with_torch.stdout[-2000:] + with_torch.stderr[-2000:]
    board = (tmp_path / "site" / "leaderboard.csv").read_text() if command == "leaderboard" else None
    without = _harness(args, block_torch=torch_block, cwd=tmp_path)
    assert BLOCKED not in without.stderr, without.stderr[-3000:]
    assert (without.returncode, without.stdout, without.stderr) == (
        with_torch.returncode, with_torch.stdout, with_torch.stderr)
    if command == "leaderboard":
        assert (tmp_path / "site" / "leaderboard.csv").read_text() == board  # the .md and .json carry a time
    if command == "check package":
        assert json.loads(without.stdout)["verdict"] == "pass"


_LOADED = textwrap.dedent("""
    import json, sys
    from harness.cli import main
    try:
        code = main(json.loads(sys.argv[1]))
    except SystemExit as exc:
        code = exc.code
    print(json.dumps({"code": code, "modules": sorted(m for m in sys.modules if m == "torch"
                      or m.startswith(("torch.", "harness.reference", "harness.runsets", "harness.inference")))}))
""")


def _loaded(argv: list[str], cwd: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _LOADED, json.dumps(argv)], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["--help"], ["check", "--help"], ["rcp", "--help"], ["leaderboard", "--help"]])
def test_help_imports_no_torch_and_no_reference(argv, tmp_path):
    loaded = _loaded(argv, tmp_path)
    assert loaded == {"code": 0, "modules": []}


def test_checking_imports_no_reference_module(results, tmp_path):
    """``harness check`` of a package (logs, run set, score, RCP, borrowing) never loads
    ``harness.reference``, not even its torch-free parts."""
    loaded = _loaded(["check", str(results / ROUND / SUBMITTER)], tmp_path)
    assert loaded == {"code": 0, "modules": []}


# ---- the lazy command group --------------------------------------------------------------------

def test_every_command_of_the_table_is_listed_with_its_own_help():
    from harness.cli import COMMANDS, cli

    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == sorted(COMMANDS)
    for name, (target, short) in COMMANDS.items():
        module, _ = target.split(":")
        command = cli.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.callback.__module__.startswith(module)
        assert " ".join(command.help.split("\n\n")[0].split()) == short, name


def test_a_command_whose_module_is_missing_fails_only_when_invoked(capsys):
    from harness.cli import COMMANDS, LazyGroup, main
    from harness.errors import HarnessError

    group = LazyGroup("t", lazy_commands={**COMMANDS, "ghost": ("harness.cli._no_such_module:ghost", "Not there.")})
    ctx = click.Context(group)
    assert "ghost" in group.list_commands(ctx)
    assert "Not there." in group.get_help(ctx)  # listing imports nothing, so it works
    with pytest.raises(HarnessError, match=r"^harness ghost is not available: its module "
                                           r"harness\.cli\._no_such_module is not in this installation$") as err:
        group.get_command(ctx, "ghost")
    assert err.value.exit_code == 4
    assert main(["--help"]) == 0 and "summarize" in capsys.readouterr().out


# ---- static: what the torch-free layers import -------------------------------------------------

TORCH_FREE = ["compliance", "harness/mllog", "harness/rules", "harness/submitters", "harness/leaderboard"]


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module an import statement of the file names, at any depth (functions included)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            out.append((node.lineno, str(node.args[0].value)))
    return out


# docs/design.md's table: each folder and the folders it may import (besides itself, the ``harness``
# package's version, and the two base modules beside every layer: errors and atomic files)
SCHEMAS, MLLOG, HW, RULES, SUBMITTERS = "compliance/schemas", "harness/mllog", "harness/hw_profiles", \
    "harness/rules", "harness/submitters"
REFERENCE, COMPLIANCE, LEADERBOARD, REPORT = "harness/reference", "compliance", "harness/leaderboard", "harness/report"
PROJECTION = "harness/projection"
BASE = ("harness/errors.py", "harness/files.py", "harness/process.py", "harness/__init__.py")
LAYERS: dict[str, tuple[str, ...]] = {
    SCHEMAS: (),
    MLLOG: (SCHEMAS,),
    HW: (MLLOG, SCHEMAS),
    RULES: (HW, MLLOG, SCHEMAS),
    SUBMITTERS: (RULES, HW, MLLOG, SCHEMAS),
    REFERENCE: (SUBMITTERS, RULES, HW, MLLOG, SCHEMAS),
    COMPLIANCE: (SUBMITTERS, RULES, HW, MLLOG, SCHEMAS),
    LEADERBOARD: (COMPLIANCE, SUBMITTERS, RULES, HW, MLLOG, SCHEMAS),
    REPORT: (LEADERBOARD, COMPLIANCE, SUBMITTERS, RULES, HW, MLLOG, SCHEMAS),
    "harness/inference": (REFERENCE, COMPLIANCE, SUBMITTERS, RULES, HW, MLLOG, SCHEMAS),
    # the projection prices a step with the sharding planner (torch-free: the test below holds it so)
    PROJECTION: (REFERENCE, COMPLIANCE, SUBMITTERS, RULES, HW, MLLOG, SCHEMAS),
    "harness/runsets": (PROJECTION, REFERENCE, COMPLIANCE, SUBMITTERS, RULES, HW, MLLOG, SCHEMAS),
    "harness/cli": ("harness", "compliance"),  # everything
    "harness/__main__.py": ("harness/cli",),
}


def _layer(rel: str) -> str | None:
    """The row of docs/design.md's table a file or an imported module (as a path) belongs to: the
    longest folder of the table that holds it."""
    rows = [k for k in LAYERS if rel == k or rel.startswith(k + "/") or rel == k.removesuffix(".py")]
    return max(rows, key=len) if rows else None


def _project_imports(path: Path, root: Path) -> list[tuple[int, str, str]]:
    """``(line, module, path of the module)`` of every import of the project's own modules in a
    file, at any depth; ``from a.b import c`` names ``a.b.c`` when that is a module, else ``a.b``."""
    def exists(target: str) -> bool:
        return (root / f"{target}.py").is_file() or (root / target).is_dir()

    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            base = node.module.replace(".", "/")
            names = [f"{node.module}.{a.name}" if exists(f"{base}/{a.name}") else node.module for a in node.names]
        for name in dict.fromkeys(names):
            if name.split(".")[0] in ("harness", "compliance"):
                out.append((node.lineno, name, name.replace(".", "/")))
    return out


def layer_violations(root: Path = ROOT) -> list[str]:
    """Every import, at any depth (inside functions too), that docs/design.md's table forbids, as
    ``file:line: <row> imports <module>, which it may not``."""
    bad = []
    for path in sorted([*(root / "harness").rglob("*.py"), *(root / "compliance").rglob("*.py")]):
        rel = path.relative_to(root).as_posix()
        row = rel if rel in BASE else _layer(rel)
        assert row is not None, f"{rel}: in no row of docs/design.md's layer table"
        for lineno, module, target in _project_imports(path, root):
            if target in ("harness", "harness/errors") or (target in ("harness/files", "harness/process")
                                                           and row != "harness/errors.py"):
                continue  # the version, and the base modules beside every layer
            where = _layer(target)
            if row in BASE or where is None:
                ok = False
            else:
                ok = where == row or where in LAYERS[row] or row in ("harness/cli", "harness/__main__.py")
            if not ok:
                bad.append(f"{rel}:{lineno}: {row} imports {module}, which it may not")
    return bad


def test_every_import_follows_the_layer_table():
    bad = layer_violations()
    assert not bad, "\n".join(bad)


def test_the_layer_check_sees_an_upward_import_inside_a_function(tmp_path):
    """A deliberate violation, hidden in a function of a copy of the tree, is caught and named."""
    import shutil as _sh

    for top in ("harness", "compliance"):
        _sh.copytree(ROOT / top, tmp_path / top, ignore=_sh.ignore_patterns("__pycache__"))
    victim = tmp_path / "harness" / "rules" / "seeds.py"
    victim.write_text(victim.read_text() + "\n\ndef _sneak():\n    from harness.reference.engine import session\n")
    line = len(victim.read_text().splitlines())
    assert layer_violations(tmp_path) == [
        f"harness/rules/seeds.py:{line}: harness/rules imports harness.reference.engine.session, which it may not"]


# the reference's own order (docs/design.md, "The reference's order"), bottom first: a folder
# imports only folders before it; the reference's root (the factories and the jobs: runs, the
# worker, the fork server) imports any of them and none imports it
REFERENCE_ORDER = [f"{REFERENCE}/{sub}" for sub in ("planner", "timing", "data", "models", "tiered", "engine",
                                                   "distributed")] + [REFERENCE]
REFERENCE_TORCH_FREE = [f"{REFERENCE}/planner", f"{REFERENCE}/timing"]  # the codecs' names and the clocks


def _reference_level(rel: str) -> int:
    """The place in :data:`REFERENCE_ORDER` of a file (or an imported module, as a path) of the reference."""
    return next(i for i, folder in enumerate(REFERENCE_ORDER) if rel.startswith(folder + "/") or rel == folder)


def reference_order_violations(root: Path = ROOT) -> list[str]:
    """Every import, at any depth, of a later folder of the reference from an earlier one, as
    ``file:line: <folder> imports <module>, which comes after it``."""
    bad = []
    for path in sorted((root / REFERENCE).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        mine = _reference_level(rel)
        for lineno, module, target in _project_imports(path, root):
            if target == REFERENCE or not target.startswith(REFERENCE + "/"):
                continue  # the package's own docstring-only __init__, or another layer (the table above)
            if _reference_level(target) > mine:
                bad.append(f"{rel}:{lineno}: {REFERENCE_ORDER[mine]} imports {module}, which comes after it")
    return bad


def test_the_reference_imports_its_own_folders_in_order():
    bad = reference_order_violations()
    assert not bad, "\n".join(bad)
    folders = {p.parent.relative_to(ROOT).as_posix() for p in (ROOT / REFERENCE).rglob("*.py")}
    assert folders == set(REFERENCE_ORDER), "every folder of the reference has its place in the order"


def test_the_reference_order_sees_an_upward_import_inside_a_function(tmp_path):
    """A model that reaches up into the engine, from inside a function, is caught and named."""
    _sh = shutil
    for top in ("harness", "compliance"):
        _sh.copytree(ROOT / top, tmp_path / top, ignore=_sh.ignore_patterns("__pycache__"))
    victim = tmp_path / REFERENCE / "models" / "dlrm.py"
    victim.write_text(victim.read_text() + "\n\ndef _sneak():\n    from harness.reference.engine import session\n")
    line = len(victim.read_text().splitlines())
    assert reference_order_violations(tmp_path) == [
        f"{REFERENCE}/models/dlrm.py:{line}: {REFERENCE}/models imports harness.reference.engine.session, "
        "which comes after it"]


def test_the_bottom_of_the_reference_imports_no_torch():
    """The planner (with the codecs' names) and the clocks are what the projection and the run set
    use without the training stack."""
    bad = [f"{path.relative_to(ROOT)}:{lineno}: imports {module}"
           for folder in REFERENCE_TORCH_FREE for path in sorted((ROOT / folder).rglob("*.py"))
           for lineno, module in _imports(path) if module.split(".")[0] == "torch"]
    assert not bad, "\n".join(bad)


def test_the_projection_imports_no_torch_and_of_the_reference_only_the_planner():
    """``harness project --against`` runs where a reviewer checks logs: no torch, no training stack."""
    bad = []
    for path in sorted((ROOT / PROJECTION).rglob("*.py")):
        for lineno, module in _imports(path):
            if module.split(".")[0] == "torch" or (module.startswith("harness.reference")
                                                   and not module.startswith("harness.reference.planner")):
                bad.append(f"{path.relative_to(ROOT)}:{lineno}: imports {module}")
    assert not bad, "\n".join(bad)


def test_torch_free_layers_import_neither_torch_nor_the_reference():
    bad = []
    for layer in TORCH_FREE:
        for path in sorted((ROOT / layer).rglob("*.py")):
            for lineno, module in _imports(path):
                if module.split(".")[0] == "torch" or module == "harness.reference" or \
                        module.startswith("harness.reference."):
                    bad.append(f"{path.relative_to(ROOT)}:{lineno}: imports {module}")
    assert not bad, "\n".join(bad)


# ---- the spec's model, and the reference's config made from it --------------------------------

def _config_from_raw(model: dict, dataset: dict):
    """The reference's config built straight from a spec file's sections, as specs.py once did."""
    from harness.reference.models.dlrm import DLRMConfig, Interaction

    return DLRMConfig(
        table_rows=tuple(dataset["table_rows"]), embedding_dim=model["embedding_dim"], pooling=tuple(dataset["pooling"]),
        bottom_mlp=tuple(model["bottom_mlp"]), top_mlp=tuple(model["top_mlp"]),
        interaction=Interaction(model["interaction"]), dcn_layers=model.get("dcn_layers", 3),
        dcn_rank=model.get("dcn_rank", 512),
        embedding_dims=tuple(model["embedding_dims"]) if "embedding_dims" in model else None,
    )


def test_every_shipped_spec_becomes_the_reference_config_it_describes():
    from harness.reference.models.embeddings import SparseOptimizerKind
    from harness.reference.models.from_spec import dlrm_config, sparse_optimizer_kind
    from harness.rules import specs

    raw = json.loads(json.dumps(specs.load_benchmark("dlrm_synthetic").raw))  # dcn: tables may differ in dimension
    raw["model"]["embedding_dims"] = [8 * (1 + i % 3) for i in range(len(raw["dataset"]["table_rows"]))]
    raw["model"]["embedding_optimizer"] = "rowwise_adagrad"
    per_table = specs.spec_from_dict(raw, what="a spec of several dimensions")
    shipped = [specs.load_benchmark(name) for name in specs.benchmark_names()]
    for spec in [s for s in shipped if s.family is specs.ModelFamily.DLRM] + [per_table]:
        name, m, d = spec.name, spec.raw["model"], spec.raw["dataset"]
        assert dlrm_config(spec) == dlrm_config(spec.model) == _config_from_raw(m, d), name
        assert sparse_optimizer_kind(spec) is SparseOptimizerKind(m.get("embedding_optimizer", "adagrad")), name
    assert [k.value for k in SparseOptimizerKind] == [k.value for k in specs.EmbeddingOptimizer]


@pytest.mark.parametrize("change", [
    {"bottom_mlp": [64, 7]},  # the dot interaction needs the bottom MLP to end at the embedding dim
    {"top_mlp": [8, 2]},  # one logit
    {"embedding_dims": [4]},  # one per table
    {"embedding_dims": "mixed"},  # several dimensions need the dcn interaction
])
def test_the_spec_refuses_what_the_reference_config_refuses_with_the_same_message(change):
    from harness.errors import HarnessError
    from harness.rules.specs import ModelSpec, load_benchmark

    spec = load_benchmark("dlrm")  # the dot interaction
    model, dataset = {**spec.raw["model"], **change}, spec.raw["dataset"]
    if model.get("embedding_dims") == "mixed":
        model["embedding_dims"] = [model["embedding_dim"]] * (len(dataset["table_rows"]) - 1) + [8]
    with pytest.raises(HarnessError) as by_spec:
        ModelSpec.from_raw(model, dataset)
    with pytest.raises(HarnessError) as by_config:
        _config_from_raw(model, dataset)
    assert str(by_spec.value) == str(by_config.value)


# ---- one MLLOG reader --------------------------------------------------------------------------

def test_every_reader_of_logs_reads_what_the_checker_reads(results):
    from harness.mllog.reader import parse_log
    from harness.reference.engine.mlperf_log import parse_records
    from harness.rules.results import read_run_log

    logs = sorted((results / ROUND / SUBMITTER / "results").rglob("result_*.txt"))
    assert logs
    for log in logs:
        parsed = parse_log(log)
        assert not parsed.problems and parsed.records
        assert parse_records(log) == [r.raw for r in parsed.records]
        run = read_run_log(log)
        assert dict(run.values) == {r.key: r.value for r in parsed.records}
        assert run.run_start_ms == next(r.time_ms for r in parsed.records if r.key == "run_start")


def test_the_keys_module_names_mlperfs_keys_as_mlperf_logging_does():
    import mlperf_logging.mllog.constants as constants

    from harness.mllog import keys

    names = [k for k in vars(keys) if k.isupper() and isinstance(getattr(keys, k), str)]
    mlperf = [k for k in names if not k.startswith("HARNESS_") and k not in keys.NOT_IN_MLPERF_CONSTANTS]
    assert len(mlperf) >= 25
    assert {k: getattr(keys, k) for k in mlperf} == {k: getattr(constants, k) for k in mlperf}
    assert all(not hasattr(constants, k) for k in keys.NOT_IN_MLPERF_CONSTANTS)
    assert all(getattr(keys, k) == k.lower() for k in names if k.startswith("HARNESS_"))
