"""What vLLM's scheduler tests need to run offline in a release's venv, and nothing of theirs changed.

* Model configs. The tests build `ModelConfig("facebook/opt-125m")` and a
  few others, which reads `config.json` from the Hugging Face Hub. A Hub
  cache is laid out beside the test tree with a stub `config.json` for each
  (the architecture's real sizes; no weights, no tokenizer) and the tests
  run with `HF_HUB_OFFLINE=1`. A model without a stub (the multimodal
  ones) fails its tests the same way with and without the monitors, and the
  report shows it as failing in both runs.
* pytest. The release's venv is vLLM's runtime only; pytest and its two
  dependencies go into a folder of their own (`pip install --target`),
  put on `PYTHONPATH`, so the venv itself is never changed.
* `schedspec`. The monitored classes (`schedspec.live`) import only `spec`
  and `live`; a folder holding a `schedspec` package of links to the
  installed ones is put on `PYTHONPATH` (as the live tests do).
* `--noconftest`: vLLM's conftests load GPU fixtures and models the
  scheduler tests do not use; the few markers they register are warnings.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

from ...spec.errors import InfrastructureError

PYTEST_PINS = ("pytest==8.4.2", "pluggy==1.6.0", "iniconfig==2.1.0")
_OPT = {
    "architectures": ["OPTForCausalLM"],
    "model_type": "opt",
    "vocab_size": 50272,
    "max_position_embeddings": 2048,
    "do_layer_norm_before": True,
    "bos_token_id": 2,
    "eos_token_id": 2,
    "pad_token_id": 1,
    "torch_dtype": "float16",
    "activation_function": "relu",
    "enable_bias": True,
    "layer_norm_elementwise_affine": True,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "init_std": 0.02,
    "layerdrop": 0.0,
    "use_cache": True,
}
STUB_MODELS = {
    "facebook/opt-125m": {**_OPT, "hidden_size": 768, "num_attention_heads": 12, "num_hidden_layers": 12,
                          "ffn_dim": 3072, "word_embed_proj_dim": 768},
    "facebook/opt-350m": {**_OPT, "hidden_size": 1024, "num_attention_heads": 16, "num_hidden_layers": 24,
                          "ffn_dim": 4096, "word_embed_proj_dim": 512, "do_layer_norm_before": False},
}  # fmt: skip
STUB_REVISION = "0" * 40


def hub_cache(folder: Path) -> Path:
    """A Hugging Face Hub cache (`HF_HOME`) holding a stub `config.json` for each of `STUB_MODELS`."""
    for name, config in STUB_MODELS.items():
        repo = folder / "hub" / ("models--" + name.replace("/", "--"))
        (repo / "snapshots" / STUB_REVISION).mkdir(parents=True, exist_ok=True)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(STUB_REVISION)
        (repo / "snapshots" / STUB_REVISION / "config.json").write_text(json.dumps(config, indent=1))
    return folder


def pytest_tools(venv: Path, folder: Path) -> Path:
    """pytest for the release's venv, in a folder of its own; installed once."""
    stamp = folder / ".complete"
    if stamp.is_file():
        return folder
    done = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(folder),
            *PYTEST_PINS,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise InfrastructureError("vllm-tests: installing pytest", " ".join(PYTEST_PINS), done.stderr.strip()[-300:])
    stamp.write_text("\n".join(PYTEST_PINS) + "\n")
    return folder


def schedspec_path(folder: Path) -> Path:
    """A folder holding a `schedspec` package of links to this installation's `__init__`, `spec` and `live`."""
    package = folder / "schedspec"
    package.mkdir(parents=True, exist_ok=True)
    # Found, not imported: the harness may not import `live` or the top layer, only point the venv at them.
    for name, target in (
        ("__init__.py", _origin("schedspec")),
        ("spec", _origin("schedspec.spec").parent),
        ("live", _origin("schedspec.live").parent),
    ):
        link = package / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    return folder


def _origin(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module  # this very package is installed
    return Path(spec.origin)


def test_environment(tests: Path, tools: Path, shim: Path, hub: Path, cache: Path) -> dict[str, str]:
    """The environment a test run gets: offline, CPU, our paths first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCHEDSPEC_LIVE", "PYTHONPATH"))}
    env.update(
        PYTHONPATH=os.pathsep.join(map(str, (tools, tests, shim))),
        VLLM_TARGET_DEVICE="cpu",
        HF_HOME=str(hub),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        VLLM_CACHE_ROOT=str(cache),
    )
    return env
