"""The prime-rl config snippet of docs/interop.md, loaded as prime-rl loads it: each source's
`env.taskset` through verifiers' v1 loader (the `env` extra); and, where a prime-rl checkout is
importable (docs/interop.md says how; it does not install here), through prime-rl's own
`OrchestratorConfig` and its orchestrator's `EvalEnv.start()` against verifiers' env server."""

import asyncio
import multiprocessing
import re
import tomllib

import pytest
from interop_helpers import REPO, TASKS_FILE, tasks

vf = pytest.importorskip("verifiers.v1", reason="verifiers 0.4 is in the env extra: pip install 'jacrl[env]'")


def snippet(tasks_file=TASKS_FILE) -> dict:
    """The docs' prime-rl TOML, every source pointed at `tasks_file` (the split stays as written)."""
    text = (REPO / "docs" / "interop.md").read_text()
    data = tomllib.loads(re.search(r"```toml\n(\[\[orchestrator\.train\.source\]\].*?)```", text, re.S).group(1))
    for kind in ("train", "eval"):
        for source in data["orchestrator"][kind]["source"]:
            source["env"]["taskset"]["tasks"] = str(tasks_file)
    return data


def test_the_snippets_sources_load_through_verifiers_v1_loader():
    data = snippet()
    sources = data["orchestrator"]["train"]["source"] + data["orchestrator"]["eval"]["source"]
    assert [s["env"]["taskset"]["split"] for s in sources] == ["r3", "holdout"]
    for source in sources:
        assert (source["env"]["agent"]["harness"]["id"], source["env"]["agent"]["runtime"]["type"]) == (
            "null",
            "subprocess",
        )
        taskset_config = source["env"]["taskset"]
        config = vf.utils.loaders.taskset_config_type(taskset_config["id"]).model_validate(taskset_config)
        assert [t.key for t in vf.load_taskset(config)] == [t.id for t in tasks()]


def test_prime_rls_orchestrator_loads_the_taskset_from_its_env_server():
    pytest.importorskip(
        "prime_rl.orchestrator.envs",
        reason="prime-rl does not install here; put a checkout's src/ on PYTHONPATH (docs/interop.md)",
    )
    from prime_rl.configs.orchestrator import OrchestratorConfig
    from prime_rl.orchestrator.envs import EvalEnv
    from verifiers.v1 import pool_serve_kwargs
    from verifiers.v1.serve import env_config_data, serve_env

    config = OrchestratorConfig.model_validate(snippet()["orchestrator"])
    source = config.eval.source[0]
    assert type(source.env.taskset).__name__ == "JacTasksetConfig" and source.env.taskset.split == "holdout"
    ctx = multiprocessing.get_context("spawn")
    addresses = ctx.Queue()
    server = ctx.Process(  # what prime-rl's env-server entry point runs for this source
        target=serve_env,
        kwargs=dict(
            **pool_serve_kwargs(source.serve.pool),
            address="tcp://127.0.0.1:0",
            address_queue=addresses,
            config_data=env_config_data(source.env),
            max_concurrent=source.serve.max_concurrent,
        ),
    )
    server.start()
    try:
        env = EvalEnv(source, addresses.get(timeout=120))
        asyncio.run(env.start())
    finally:
        server.terminate()
        server.join(30)
    assert env.num_tasks == len(tasks()) and [t.key for t in env.examples] == [t.id for t in tasks()]
    assert type(env.examples[0]).__name__ == "JacTask"
