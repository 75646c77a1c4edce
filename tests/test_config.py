"""The config model: defaults, unknown keys, wrong types — each error names the key."""

import copy
import logging
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from jacrl.config import LOSS_KEYS, Config, ConfigError, load_config, load_config_file
from jacrl.ladder.config import CONDITIONS, DEFAULT_CONDITIONS, SPLITS
from jacrl.losses.config import LossConfigWarning, LossFrameworkConfig
from jacrl.reward.cache import reward_config_digest
from jacrl.reward.config import RewardConfig
from jacrl.rl.config import GRPOArm, GRPOConfig
from jacrl.strict import StrictModel


def test_default_config_file_validates(repo):
    cfg = load_config(yaml.safe_load((repo / "config.yaml").read_text()))
    assert isinstance(cfg, Config) and cfg.rungs == [1, 3, "all"]


def test_unknown_key_names_key_and_allowed_ones():
    with pytest.raises(ConfigError) as err:
        load_config({"splits": {"holdot_size": 3}})
    msg = str(err.value)
    assert "splits.holdot_size" in msg and "holdout_size" in msg and "decontam_threshold" in msg


def test_the_old_valid_size_key_names_the_valid_drivers_in_one_line():
    with pytest.raises(ConfigError) as err:
        load_config({"splits": {"valid_size": 4}})
    [line] = str(err.value).splitlines()[1:]
    assert "splits.valid_size is gone" in line and "tasks.valid_drivers" in line


def test_the_smart_plan_needs_the_val_cells():
    with pytest.raises(
        ConfigError, match="ladder.plan smart needs `val` in ladder.splits: its elbow reads the SFT val"
    ):
        load_config({"ladder": {"plan": "smart", "splits": ["gen", "mem"]}})


def test_unknown_top_level_key():
    with pytest.raises(ConfigError, match="unknown config key 'rungz'.*allowed keys under the top level"):
        load_config({"rungz": [1]})


def test_wrong_type_names_key():
    with pytest.raises(ConfigError, match="config key 'splits.decontam_threshold'"):
        load_config({"splits": {"decontam_threshold": "high"}})
    with pytest.raises(ConfigError, match="rungs"):
        load_config({"rungs": [0]})


def test_reward_timeout_is_gone_with_a_pointer_to_tasks_timeout():
    with pytest.raises(ConfigError, match=r"config key 'reward': `reward.timeout` is gone: .*`tasks.timeout`"):
        load_config({"reward": {"timeout": 20}})


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ({"grpo": {"max_completion": 64}}, "config key 'grpo.max_completion' is now 'grpo.max_tokens'"),
        (
            {"grpo": {"lora_layers": 8}},
            "config key 'grpo.lora_layers' is now 'grpo.lora.layers' ('lora.layers' at the top level sets every stage's)",
        ),
        (
            {"sft": {"rank": 4, "lr": 1e-3}},
            "config key 'sft.rank' is now 'sft.lora.rank' ('lora.rank' at the top level sets every stage's)",
        ),
        (
            {"grpo_arms": {"tuned": {"grpo": {"lora_scale": 2.0}}}},
            "config key 'grpo_arms.tuned.grpo.lora_scale' is now 'grpo_arms.tuned.grpo.lora.scale' ('lora.scale' at "
            "the top level sets every stage's)",
        ),
    ],
)
def test_a_renamed_key_is_refused_in_one_line_naming_its_new_key(data, line):
    with pytest.raises(ConfigError) as err:
        load_config(data)
    assert str(err.value).splitlines()[1:] == [f"  {line}"]


def test_one_lora_section_shapes_every_fresh_adapter_and_a_stage_sets_keys_over_it():
    assert GRPOConfig().lora == Config().sft.lora == Config().lora  # one default
    cfg = load_config(
        {
            "lora": {"rank": 4, "layers": 2},
            "grpo": {"lora": {"scale": 3.0}},
            "grpo_arms": {"tuned": {"grpo": {"lora": {"layers": 1}}}, "plain": {"grpo": {"lr": 1e-5}}},
        }
    )
    shape = lambda lora: (lora.rank, lora.scale, lora.layers)  # noqa: E731
    assert shape(cfg.sft.lora) == (4, 20.0, 2) and shape(cfg.grpo.lora) == (4, 3.0, 2)
    assert shape(cfg.grpo_arms["tuned"].grpo.lora) == (4, 3.0, 1) and cfg.grpo_arms["plain"].grpo.lora == cfg.grpo.lora
    assert load_config(cfg.grpo_job_config("tuned")).grpo.lora == cfg.grpo_arms["tuned"].grpo.lora  # the job reads it
    assert cfg.opd.grpo(cfg.grpo).lora == cfg.grpo.lora
    assert cfg.sft.lora.spec().layer_ids(6) == [4, 5]


def test_conditions_and_splits_are_one_vocabulary():
    with pytest.raises(
        ConfigError,
        match=r"ladder.conditions.0.*'base', 'sft', 'sft_grpo', 'raw_grpo', 'opd', 'sft_ei' or 'raw_ei'.*got 'grpo'",
    ):
        load_config({"ladder": {"conditions": ["grpo"]}})
    with pytest.raises(ConfigError, match=r"eval.policy_splits.0.*'gen', 'mem' or 'val'"):
        load_config({"eval": {"policy_splits": ["train"]}})
    assert load_config({}).ladder.conditions == list(DEFAULT_CONDITIONS)
    # unset splits follow the plan: the full plan chooses nothing and reads no val cell
    assert load_config({}).ladder.splits == ["gen", "mem"]
    assert load_config({"ladder": {"plan": "smart"}}).ladder.splits == list(SPLITS)
    assert load_config({"ladder": {"splits": ["gen", "val"]}}).ladder.splits == ["gen", "val"]
    assert "opd" in CONDITIONS and "opd" not in DEFAULT_CONDITIONS
    assert {"sft_ei", "raw_ei"} <= set(CONDITIONS) and not {"sft_ei", "raw_ei"} & set(DEFAULT_CONDITIONS)


def test_ei_arm_must_be_a_grpo_arm():
    with pytest.raises(ConfigError, match="ei.arm 'fast' is not in `grpo_arms` \\(none defined\\)"):
        load_config({"ei": {"arm": "fast"}})
    cfg = load_config({"ei": {"arm": "fast"}, "grpo_arms": {"fast": {"grpo": {"iters": 3}}}})
    assert cfg.ei_job_config()["grpo"]["iters"] == 3 and "arm" not in cfg.ei_job_config()["ei"]


def test_the_score_cache_key_ignores_runner_workers_and_the_unused_scheme():
    base = reward_config_digest(RewardConfig())
    assert (
        reward_config_digest(RewardConfig(workers=4, runner="subprocess", cache=False, dense_v2={"runs": 0.5})) == base
    )
    assert reward_config_digest(RewardConfig(tiered={"exact": 2.0})) != base
    assert reward_config_digest(RewardConfig(isolation="weak")) != base


def _nested_models(annotation):
    """Every pydantic model class inside a field's annotation (list[X], X | None, Annotated[Union[...]])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _nested_models(arg)]


def _sections(model, seen):
    if model in seen:
        return
    seen.add(model)
    for field in model.model_fields.values():
        for sub in _nested_models(field.annotation):
            _sections(sub, seen)


def test_every_section_has_one_strict_base_and_every_field_a_description():
    seen: set = set()
    _sections(Config, seen)
    assert len(seen) > 20
    for model in seen:
        assert issubclass(model, StrictModel), model
        undocumented = [n for n, f in model.model_fields.items() if not f.description]
        assert not undocumented, f"{model.__name__}: {undocumented}"


TUNED = {"grpo": {"iters": 8, "lr": 1e-4}, "grpo_arms": {"tuned": {"grpo": {"lr": 1e-5, "iters": 500}}}}


def test_an_arm_is_the_top_level_grpo_with_its_keys_over_it():
    cfg = load_config({**TUNED, "losses": [{"type": "rl"}, {"type": "ref_kl", "beta": 0.04}]})
    arm = cfg.grpo_arms["tuned"]
    assert (arm.grpo.lr, arm.grpo.iters) == (1e-5, 500)
    assert arm.grpo.model_dump(exclude={"lr", "iters"}) == cfg.grpo.model_dump(exclude={"lr", "iters"})
    assert arm.losses == cfg.loss_framework.losses  # not overridden: the top-level terms
    job = load_config(cfg.grpo_job_config("tuned"))  # what the GRPO job of sft_grpo@tuned reads
    assert (job.grpo.lr, job.grpo.iters, job.loss_framework.losses) == (1e-5, 500, cfg.loss_framework.losses)
    assert cfg.grpo_job_config(None) == {
        **cfg.loss_framework.model_dump(mode="json"),
        **cfg.model_dump(mode="json", include={"threads", "reward", "grpo"}),
    }
    own = load_config({**TUNED, "grpo_arms": {"tuned": {"losses": [{"type": "rl", "kl_tau": 0.5}]}}}).grpo_arms["tuned"]
    assert own.losses[0].kl_tau == 0.5 and own.trainer.losses is None and own.grpo == cfg.grpo
    assert cfg.conditions == [*CONDITIONS, "sft_grpo@tuned", "raw_grpo@tuned"]


def test_the_root_holds_the_loss_keys_it_reads_at_the_top_level_as_one_section():
    cfg = load_config({"losses": [{"type": "rl"}, {"type": "ref_kl"}], "orchestrator": {"renderer": "chat_template"}})
    assert isinstance(cfg.loss_framework, LossFrameworkConfig) and not set(LOSS_KEYS) & set(Config.model_fields)
    assert [t.type for t in cfg.loss_framework.losses] == ["rl", "ref_kl"]
    assert cfg.loss_framework.orchestrator.renderer == "chat_template"
    dumped = cfg.model_dump(mode="json")
    assert load_config(dumped) == cfg  # a dump holds the section under its own key, and reads back
    with pytest.raises(
        ConfigError, match=r"loss keys are given twice, at the top level \(losses\) and under `loss_framework`"
    ):
        load_config({**dumped, "losses": [{"type": "rl"}]})


@pytest.mark.parametrize(
    "data,needle",
    [
        (
            {"losses": [{"type": "rl"}, {"type": "echo", "alpa": 0.5}]},
            "unknown config key 'losses.1.echo.alpa'; allowed keys under losses.1.echo: assistant, filter, name,",
        ),
        ({"trainer": {"foo": 1}}, "unknown config key 'trainer.foo'; allowed keys under trainer: losses, opd"),
        ({"training_mode": "rlx"}, "config key 'training_mode': Input should be 'rl', 'sft' or 'opd' (got 'rlx')"),
        (
            {"rungz": [1]},
            "allowed keys under the top level: determinism, ei, eval, grpo, grpo_arms, ladder, lora, loss_framework,",
        ),
        (
            {"rungz": [1]},
            " orchestrator, reward, rft, rungs, sft, splits, tasks, threads, tiny, tracking, train_threads,",
        ),
    ],
)
def test_a_loss_key_error_names_the_key_as_the_file_writes_it(data, needle):
    with pytest.raises(ConfigError) as err:
        load_config(data)
    assert needle in str(err.value)


def test_loading_changes_neither_its_input_nor_the_config_it_made():
    data = {
        "losses": [{"type": "rl"}, {"type": "ref_kl"}],
        "training_mode": "sft",
        "orchestrator": {"renderer": "chat_template"},  # read as None under sft
        "eval": {},  # its policy_temperature is read from grpo's
        **TUNED,
    }
    written = copy.deepcopy(data)
    with pytest.warns(LossConfigWarning, match="forces plain-text prompts"):
        cfg = load_config(data)
    assert data == written
    assert cfg.loss_framework.orchestrator.renderer is None and cfg.eval.policy_temperature == cfg.grpo.temperature
    made = cfg.model_dump()
    cfg.grpo_run(None), cfg.grpo_job_config(None), cfg.grpo_job_config("tuned"), cfg.opd_job_config()
    assert cfg.model_dump() == made


def test_every_grpo_run_is_one_typed_record_of_its_grpo_and_loss_sections():
    cfg = load_config({**TUNED, "losses": [{"type": "rl"}, {"type": "ref_kl"}]})
    default, tuned = cfg.grpo_run(None), cfg.grpo_run("tuned")
    assert isinstance(default, GRPOArm) and isinstance(tuned, GRPOArm)
    assert default.grpo == cfg.grpo and default.model_dump(exclude={"grpo"}) == cfg.loss_framework.model_dump()
    assert tuned.losses == default.losses and tuned.grpo.lr == 1e-5
    for arm in (None, "tuned"):  # a rule's params are compared as written: the keys keep their order
        assert list(cfg.grpo_job_config(arm)) == [*LOSS_KEYS, "threads", "reward", "grpo"]


def test_the_opd_job_takes_its_own_steps_lr_and_temperature_and_the_other_jobs_do_not():
    cfg = load_config({"grpo": {"temperature": 0.9, "iters": 8}, "opd": {"temperature": 0.3, "iters": 200, "lr": 2e-3}})
    opd = load_config(cfg.opd_job_config())
    assert (opd.loss_framework.training_mode, opd.grpo.temperature, opd.grpo.iters, opd.grpo.lr) == (
        "opd",
        0.3,
        200,
        2e-3,
    )
    assert load_config(cfg.grpo_job_config(None)).grpo.model_dump() == cfg.grpo.model_dump()
    assert load_config(load_config({}).opd_job_config()).grpo.temperature == load_config({}).grpo.temperature


def test_the_opd_section_owns_the_divergence_and_the_job_trains_toward_it():
    core = {"divergence": "forward", "teacher_temperature": 0}
    cfg = load_config({"opd": {"core": core}})
    job = load_config(cfg.opd_job_config())
    assert job.loss_framework.training_mode == "opd"
    assert job.loss_framework.trainer.opd.model_dump(exclude={"estimator"}) == core
    assert load_config(cfg.grpo_job_config(None)).loss_framework.training_mode == "rl"
    with pytest.raises(ConfigError, match="trainer.opd is the opd condition's divergence: set it as opd.core"):
        load_config({"trainer": {"opd": core}})
    with pytest.raises(ConfigError, match=r"opd.core.*divergence 'forward' needs estimator 'full'"):
        load_config({"opd": {"core": {"divergence": "forward", "estimator": "sampled"}}})


def test_the_opd_job_takes_its_own_loss_terms_and_the_other_jobs_keep_the_top_levels():
    top = [{"type": "rl"}, {"type": "ref_kl", "name": "ref_kl", "beta": 0.04}]
    cfg = load_config({"losses": top, "opd": {"losses": [{"type": "echo", "assistant": {"alpha": 0.5}}]}})
    opd = load_config(cfg.opd_job_config()).loss_framework
    assert [t.type for t in opd.losses] == [t["type"] for t in opd.result_settings()["trainer"]["losses"]] == ["echo"]
    assert [t.type for t in load_config(cfg.grpo_job_config(None)).loss_framework.losses] == ["rl", "ref_kl"]
    unset = load_config({"losses": top})
    assert [t.type for t in load_config(unset.opd_job_config()).loss_framework.losses] == ["rl", "ref_kl"]


@pytest.mark.parametrize(
    "data,needle",
    [
        ({"opd": {"losses": [{"type": "ref_kl"}, {"type": "ref_kl"}]}}, r"opd.losses\[1\] and opd.losses\[0\]"),
        (
            {
                "losses": [{"type": "rl"}, {"type": "echo", "assistant": {"alpha": 0.5}}],
                "orchestrator": {"train": {"env": [{"id": "jac", "name": "a", "enabled_losses": ["echo"]}]}},
                "opd": {"losses": []},
                "ladder": {"conditions": ["base", "opd"]},
            },
            r"opd.losses does not fit the other loss keys.*env\[0\] \('a'\).enabled_losses names 'echo'",
        ),
    ],
)
def test_opd_terms_that_do_not_fit_are_refused_at_load(data, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(data)


def test_opd_terms_are_not_checked_where_no_opd_cell_is_selected():
    """An env naming `rl` beside `opd.losses: []` (config.yaml's) is a run that never starts an opd job."""
    envs = {"train": {"env": [{"id": "jac", "name": "a", "enabled_losses": ["rl"]}]}}
    cfg = load_config({"orchestrator": envs, "opd": {"losses": []}})
    assert "opd" not in cfg.ladder.conditions


@pytest.mark.parametrize(
    "data,needle",
    [
        (
            {"grpo_arms": {"tuned": {"grpo": {"lrr": 1}}}},
            "unknown config key 'grpo_arms.tuned.grpo.lrr'; allowed keys under grpo_arms.tuned.grpo: advantage,",
        ),
        (
            {"grpo_arms": {"tuned": {"grpo": {"lr": -1}}}},
            "config key 'grpo_arms.tuned.grpo.lr': Input should be greater than 0",
        ),
        (
            {"grpo_arms": {"tuned": {"sft": {}}}},
            "unknown config key 'grpo_arms.tuned.sft'; allowed keys under grpo_arms.tuned: grpo, losses,",
        ),
        (
            {"grpo_arms": {"tuned": {"losses": [{"type": "ref_kl"}]}}},
            "config key 'grpo_arms.tuned': Value error, training_mode = 'rl' needs a primary",
        ),
        ({"grpo_arms": {"a/b": {}}}, "arm names ['a/b'] must match"),
        (
            {"ladder": {"conditions": ["sft_grpo@tuned"]}},
            "ladder.conditions names ['sft_grpo@tuned'], whose arm is not in `grpo_arms`",
        ),
        (
            {"ladder": {"conditions": ["sft@tuned"]}},
            "config key 'ladder.conditions.0': Value error, Input should be 'base', 'sft'",
        ),
        ({"ladder": {"plan": "smart", "splits": ["gen"]}}, "ladder.plan smart needs `mem` in ladder.splits"),
        ({"ladder": {"plan": "greedy"}}, "config key 'ladder.plan': Input should be 'full' or 'smart'"),
        ({"rft": {"tasks": "all"}}, "config key 'rft.tasks': Input should be 'rung' or 'pool'"),
    ],
)
def test_bad_arms_and_plans_are_named(data, needle):
    with pytest.raises(ConfigError) as err:
        load_config(data)
    assert needle in str(err.value)


def test_multi_run_refuses_an_arm_whose_losses_differ_naming_it():
    arms = {"grpo_arms": {"same": {"grpo": {"lr": 1e-5}}, "odd": {"losses": [{"type": "rl", "kl_tau": 0.5}]}}}
    load_config(arms)  # separate jobs: any losses per arm
    with pytest.raises(ConfigError, match=r"run 'sft_grpo@odd': its orchestrator.losses .* differ from the trainer's"):
        load_config({**arms, "ladder": {"multi_run": True}})
    load_config({"grpo_arms": {"same": {"grpo": {"lr": 1e-5}}}, "ladder": {"multi_run": True}})


def test_an_arm_trains_on_its_floor_share_while_the_cells_judge_with_the_reward():
    cfg = load_config({"grpo_arms": {"floor": {"grpo": {"floor_share": 0.5}}}})
    job = load_config(cfg.grpo_job_config("floor"))  # what the GRPO job of sft_grpo@floor reads
    trained = job.grpo.training_reward(job.reward)
    assert trained.tiered.floor_share == 0.5 and job.reward.tiered.floor_share == 0.0
    assert trained.model_dump(exclude={"tiered"}) == job.reward.model_dump(exclude={"tiered"})
    assert reward_config_digest(trained) != reward_config_digest(job.reward)  # its scores cache apart
    default = load_config(cfg.grpo_job_config(None))
    assert default.grpo.training_reward(default.reward) is default.reward
    with pytest.raises(ConfigError, match=r"grpo.floor_share differs between arms \(default arm: None, floor: 0.5\)"):
        load_config({**cfg.model_dump(mode="json"), "ladder": {"multi_run": True}})
    with pytest.raises(ConfigError, match=r"grpo.floor_share \(floor\) scales the tiered scheme's floors, but reward"):
        load_config({**cfg.model_dump(mode="json"), "reward": {"scheme": "dense_v2"}})


def test_a_knob_added_later_is_left_out_of_every_dump_at_its_default():
    """A rule's params are the dumped config: a knob added after jobs ran must not change their params
    (Snakemake's params trigger would rerun them) nor the cells' hashes, until it is set."""
    cfg = load_config({"models": [{"name": "m", "builtin": "tiny"}]})
    job = cfg.grpo_job_config(None)
    assert "floor_share" not in job["grpo"] and "floor_share" not in job["reward"]["tiered"]
    assert "compile_decode" not in cfg.model("m").model_dump(mode="json")
    assert load_config(job).grpo == cfg.grpo  # what a job reads back is the same config
    set_ = load_config({"grpo": {"floor_share": 0.5}, "reward": {"tiered": {"floor_share": 0.3}}})
    job = set_.grpo_job_config(None)
    assert (job["grpo"]["floor_share"], job["reward"]["tiered"]["floor_share"]) == (0.5, 0.3)
    assert set_.reward.result_settings()["weights"]["floor_share"] == 0.3


def test_an_unset_policy_temperature_is_grpos_and_the_config_says_so_once(caplog):
    caplog.set_level(logging.INFO, logger="jacrl.config")
    said = lambda: [r.getMessage() for r in caplog.records if r.name == "jacrl.config"]  # noqa: E731
    assert load_config({"grpo": {"temperature": 0.437}}).eval.policy_temperature == 0.437
    assert said() == [
        "eval.policy_temperature is unset, so the policy samples are drawn at grpo.temperature (0.437), "
        "the one GRPO samples at, for every arm's cells alike"
    ]
    load_config({"grpo": {"temperature": 0.437}})
    assert len(said()) == 1
    caplog.clear()
    assert (
        load_config({"grpo": {"temperature": 0.437}, "eval": {"policy_temperature": 0.2}}).eval.policy_temperature
        == 0.2
    )
    assert said() == []


def layered(*files: str) -> Config:
    """config.yaml with `files` over it, merged as `--configfile` merges them (Snakemake's recursive update)."""
    from snakemake.utils import update_config

    root = Path(__file__).resolve().parents[1]
    merged = yaml.safe_load((root / "config.yaml").read_text())
    for name in files:
        update_config(merged, yaml.safe_load((root / name).read_text()))
    return load_config(merged)


def test_a_config_file_with_overlays_merges_as_snakemake_merges_configfiles():
    root = Path(__file__).resolve().parents[1]
    files = ("configs/smollm2-cpu.yaml", "configs/smollm2-cpu-smart.yaml")
    assert load_config_file(root / "config.yaml", *(root / f for f in files)) == layered(*files)
    assert load_config_file(root / "config.yaml") == layered()


def test_the_smollm2_smart_ladder_gives_grpo_enough_to_measure():
    """Every elbow it can pick gets >= 10 draws of each task in >= 100 GRPO steps of group >= 8, in both
    arms; mem cells draw >= 8 policy samples of every task, gen greedy and 8 samples a task on the whole holdout."""
    cfg = layered("configs/smollm2-cpu.yaml", "configs/smollm2-cpu-smart.yaml")
    assert cfg.ladder.plan == "smart" and [m.name for m in cfg.models] == ["smollm2"]
    largest = max(r for r in cfg.rungs if r != "all")
    assert "all" not in cfg.rungs
    for arm in (None, "tuned"):
        g = cfg.grpo_job_config(arm)["grpo"]
        assert g["iters"] >= 100 and g["iters"] * g["prompts_per_step"] >= 10 * largest and g["group_size"] >= 8
    assert cfg.eval.policy_n >= 8 and cfg.eval.policy_splits == ["mem"] and cfg.eval.mem_max_tasks is None
    assert (
        cfg.eval.samples_on("gen") == cfg.eval.k == 8 and not cfg.eval.samples_on("mem") and cfg.sft.epochs is not None
    )


def test_the_source_grid_over_config_yaml_is_the_sources():
    """configs/source_grid.yaml merged over config.yaml as `--configfile` merges it (Snakemake's
    recursive update): the keys that make it the source's grid, none inherited from the tiny ladder."""
    cfg = layered("configs/source_grid.yaml")
    assert cfg.rungs == [1, 3, 5, 10, 20, "all"] and [m.name for m in cfg.models] == ["qwen3coder", "jac-qwen3coder"]
    assert cfg.ladder.conditions == ["base", "sft", "sft_grpo", "raw_grpo"] and cfg.ladder.splits == ["gen", "mem"]
    assert (cfg.eval.n, cfg.eval.k, cfg.eval.temperature, cfg.eval.max_tokens) == (8, 8, 1.0, 256)
    assert cfg.eval.sample_splits == ["gen"] and cfg.eval.mem_max_tasks is None and cfg.eval.policy_n == 0
    assert cfg.reward.scheme == "dense_v2" and cfg.grpo.reference == "base"
    g = cfg.grpo
    assert (g.iters, g.lr, g.group_size, g.max_tokens, g.max_seq, g.temperature) == (200, 1e-6, 4, 256, 1280, 1.0)
    assert (g.lora.layers, g.lora.rank, g.lora.scale, g.lora.dropout, g.save_every) == (8, 8, 10.0, 0.0, 50)
    assert [(t.type, getattr(t, "beta", None)) for t in cfg.loss_framework.losses] == [("rl", None), ("ref_kl", 0.04)]
    tuned = cfg.grpo_arms["tuned"].grpo
    assert (tuned.iters, tuned.lr) == (500, 1e-5)
    s = cfg.sft
    assert (s.lr, s.lora.rank, s.lora.scale, s.lora.dropout, s.lora.layers, s.lr_schedule) == (
        2e-5,
        16,
        2.0,
        0.05,
        16,
        "cosine",
    )


def test_seeds_run_each_trained_condition_once_per_seed_and_leave_one_seed_alone():
    one = layered()
    assert one.ladder.seeds == [0] and "sft_grpo" in one.conditions and one.ladder_conditions == one.ladder.conditions
    cfg = load_config({**yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text()),
                       "ladder": {"seeds": [0, 1]}})  # fmt: skip
    assert cfg.ladder_conditions == [
        "base",
        "sft.s0",
        "sft.s1",
        "sft_grpo.s0",
        "sft_grpo.s1",
        "raw_grpo.s0",
        "raw_grpo.s1",
    ]
    assert "sft_grpo@tuned.s1" in cfg.conditions and "sft_grpo" not in cfg.conditions
    assert cfg.sft_job_config("sft.s1")["seed"] == cfg.sft.seed + 1
    assert cfg.grpo_job_config("tuned", 1)["grpo"]["seed"] == cfg.grpo_arms["tuned"].grpo.seed + 1
    assert cfg.grpo_job_config(None) == one.grpo_job_config(None)  # seed 0 and no seed: the same job
    for bad, match in (({"seeds": [1, 1]}, "unique"), ({"seeds": [0, 1], "plan": "smart"}, "full plan")):
        with pytest.raises(ConfigError, match=match):
            load_config({"ladder": bad})
