"""The `losses` config: defaults, propagation to trainer and orchestrator, and every validator."""

import copy
import warnings

import pydantic
import pytest

from jacrl.losses import (
    EchoLossConfig,
    LossConfigWarning,
    LossFrameworkConfig,
    OrchestratorConfig,
    RLLossConfig,
    TrainerConfig,
    check_resume_compatible,
    dump_losses,
    env_config,
    parse_losses,
    term_config,
)
from jacrl.losses import config as config_module
from jacrl.losses.plan import EnvLossPlans

RL_ECHO = [{"type": "rl"}, {"type": "echo", "name": "echo", "assistant": {"alpha": 0.5}}]


def load(raw):
    return LossFrameworkConfig.model_validate(raw)


def rejects(raw, *patterns):
    """Validation fails and the message contains every pattern (the offending field's name)."""
    with pytest.raises(pydantic.ValidationError) as info:
        load(raw)
    message = str(info.value)
    for pattern in patterns:
        assert pattern in message, f"{pattern!r} not in:\n{message}"
    return message


# ---------------------------------------------------------------------------------------------
# defaults and propagation
# ---------------------------------------------------------------------------------------------


def test_default_is_rl_with_the_documented_knobs():
    config = load({})
    assert config.losses == [RLLossConfig()]
    (rl,) = config.losses
    assert (rl.name, rl.kl_tau, rl.dppo_mask_low, rl.dppo_mask_high, rl.adv_tau) == ("rl", 1e-3, 0.2, 0.2, 1.0)
    assert config.training_mode == "rl"


def test_the_term_list_exists_once():
    """Both sides read the top-level list: no copy is made into the sections, and validating leaves the
    input and the validated config as they were."""
    raw = {"losses": RL_ECHO, "training_mode": "rl"}
    before = copy.deepcopy(raw)
    config = load(raw)
    assert config.trainer.losses is None and config.orchestrator.losses is None
    assert raw == before
    again = LossFrameworkConfig.model_validate(config)
    assert again.model_dump() == config.model_dump()


def test_results_record_the_terms_under_each_side():
    """A cell's and an adapter's recorded settings keep the terms under the trainer and the orchestrator,
    as they did when the sections held copies: hashes of what was built before stay."""
    settings = load({"losses": RL_ECHO}).result_settings()
    assert settings["trainer"]["losses"] == settings["orchestrator"]["losses"] == settings["losses"]
    assert [t["type"] for t in settings["losses"]] == ["rl", "echo"]


def test_setting_the_same_losses_in_a_section_is_accepted():
    config = load({"losses": RL_ECHO, "trainer": {"losses": RL_ECHO}, "orchestrator": {"losses": RL_ECHO}})
    assert dump_losses(config.trainer.losses) == dump_losses(config.losses)


@pytest.mark.parametrize("section", ["trainer", "orchestrator"])
def test_a_section_with_different_losses_is_rejected(section):
    rejects({"losses": RL_ECHO, section: {"losses": [{"type": "rl"}]}}, f"{section}.losses differs")
    rejects({section: {"losses": [{"type": "rl", "kl_tau": 0.5}]}}, f"{section}.losses differs")


def test_trainer_and_orchestrator_losses_must_agree():
    rejects({"trainer": {"losses": RL_ECHO}, "orchestrator": {"losses": [{"type": "rl"}]}}, "trainer.losses differs")
    config = load({"losses": RL_ECHO, "trainer": {"losses": RL_ECHO}, "orchestrator": {"losses": RL_ECHO}})
    assert dump_losses(config.trainer.losses) == dump_losses(config.orchestrator.losses) == dump_losses(config.losses)
    assert config.result_settings()["trainer"]["losses"] == dump_losses(config.losses)


def test_root_config_can_subclass_the_framework_config():
    class GRPOTrainer(TrainerConfig):
        lr: float = pydantic.Field(1e-5, description="learning rate")

    class Config(LossFrameworkConfig):
        trainer: GRPOTrainer = pydantic.Field(default_factory=GRPOTrainer, description="trainer")
        seed: int = pydantic.Field(0, description="seed")

    config = Config.model_validate({"losses": RL_ECHO, "trainer": {"lr": 1e-4}, "seed": 3})
    assert config.trainer.lr == 1e-4 and [t.name for t in config.losses] == ["rl", "echo"]
    with pytest.raises(pydantic.ValidationError, match="seeed"):
        Config.model_validate({"seeed": 3})


def test_every_config_field_is_documented():
    modules = (config_module, env_config, term_config)
    models = {
        value
        for module in modules
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, pydantic.BaseModel)
        and value.__module__ == module.__name__  # defined there, not imported
    }
    assert len(models) >= 10
    for model in models:
        assert model.model_config.get("extra") == "forbid", model.__name__
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"


# ---------------------------------------------------------------------------------------------
# term validators
# ---------------------------------------------------------------------------------------------


def test_term_names_must_be_unique():
    rejects(
        {"losses": [{"type": "rl"}, {"type": "echo", "user": {"alpha": 1}}, {"type": "echo", "tool": {"alpha": 1}}]},
        "losses[2] and losses[1] are both named 'echo'",
    )


def test_at_most_one_primary():
    rejects(
        {"losses": [{"type": "rl"}, {"type": "custom", "import_path": "pkg.core"}]},
        "at most one primary",
        "losses[0] (rl 'rl')",
        "losses[1] (custom 'custom')",
    )


def test_rl_mode_requires_a_primary():
    rejects({"losses": [{"type": "echo", "assistant": {"alpha": 1}}]}, "training_mode = 'rl' needs a primary")
    rejects({"losses": []}, "training_mode = 'rl' needs a primary")


def test_sft_mode_needs_no_primary():
    config = load({"training_mode": "sft", "losses": [{"type": "echo", "assistant": {"alpha": 1}}]})
    assert [t.name for t in config.losses] == ["echo"]


def test_echo_needs_at_least_one_role():
    rejects({"losses": [{"type": "rl"}, {"type": "echo", "name": "e"}]}, "echo term 'e' configures no role")


def test_tool_names_only_on_the_tool_role():
    rejects(
        {"losses": [{"type": "rl"}, {"type": "echo", "user": {"alpha": 1, "tool_names": ["calc"]}}]},
        "`user.tool_names` is only valid on the `tool` role",
    )


def test_echo_alpha_is_required():
    rejects({"losses": [{"type": "rl"}, {"type": "echo", "user": {}}]}, "losses.1.echo.user.alpha")


def test_unknown_term_type_is_rejected():
    rejects({"losses": [{"type": "dpo"}]}, "losses.0", "'rl', 'echo', 'custom', 'ref_kl'")


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"loss": []}, "loss"),
        ({"losses": [{"type": "rl", "kl_tauu": 1}]}, "kl_tauu"),
        ({"losses": [{"type": "rl", "name": "rl2"}]}, "losses.0.rl.name"),
        ({"losses": RL_ECHO[:1] + [{"type": "echo", "assistant": {"alpa": 1, "alpha": 1}}]}, "alpa"),
        (
            {
                "losses": RL_ECHO[:1]
                + [{"type": "echo", "user": {"alpha": 1}, "filter": {"import_path": "a.b", "kwarg": {}}}]
            },
            "kwarg",
        ),
        ({"losses": [{"type": "ref_kl", "beat": 1}, {"type": "rl"}]}, "beat"),
        ({"orchestrator": {"renderr": "chat_template"}}, "renderr"),
        ({"orchestrator": {"train": {"env": [{"id": "jac", "name": "a", "enabled_loss": ["rl"]}]}}}, "enabled_loss"),
        ({"trainer": {"los": []}}, "los"),
    ],
)
def test_unknown_keys_fail_naming_the_key(raw, key):
    message = rejects(raw, key)
    assert "Extra inputs are not permitted" in message or "Input should be" in message


def test_import_paths_must_name_a_module_attribute():
    rejects({"losses": [{"type": "custom", "import_path": "justaname"}]}, "losses.0.custom.import_path")


# ---------------------------------------------------------------------------------------------
# per-env validators
# ---------------------------------------------------------------------------------------------


def envs(*entries, losses=RL_ECHO, **extra):
    return {"losses": losses, "orchestrator": {"train": {"env": list(entries)}, **extra}}


def test_enabled_losses_must_be_defined_terms():
    rejects(
        envs({"id": "jac", "name": "a", "enabled_losses": ["rl", "ecko"]}),
        "orchestrator.train.env[0] ('a').enabled_losses names 'ecko'",
        "defined: rl, echo",
    )


def test_enabled_losses_without_duplicates():
    rejects(envs({"id": "jac", "name": "a", "enabled_losses": ["rl", "rl"]}), "lists a term twice")


def test_env_names_must_be_unique():
    rejects(envs({"id": "jac", "name": "x"}, {"id": "jac", "name": "x"}), "env name 'x' is also used")


TWO_ECHOES = RL_ECHO + [{"type": "echo", "name": "echo2", "user": {"alpha": 1}}]


def test_at_most_one_echo_term_per_env():
    rejects(
        envs({"id": "jac", "name": "a", "enabled_losses": ["rl", "echo", "echo2"]}, losses=TWO_ECHOES),
        "at most one echo term per env",
    )
    rejects(envs({"id": "jac", "name": "a"}, losses=TWO_ECHOES), "enabled_losses = None enables every term")
    rejects({"losses": TWO_ECHOES}, "one implicit env")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LossConfigWarning)
        ok = load(
            envs(
                {"id": "jac", "name": "a", "enabled_losses": ["rl", "echo"]},
                {"id": "jac", "name": "b", "enabled_losses": ["echo2"]},
                losses=TWO_ECHOES,
            )
        )
    assert len(ok.orchestrator.train.env) == 2


def test_loss_overrides_keys_must_be_defined_echo_terms():
    rejects(
        envs({"id": "jac", "name": "a", "loss_overrides": {"rl": {"kl_tau": 0.1}}}),
        "loss_overrides key 'rl' is not a defined echo term",
    )
    rejects(
        envs({"id": "jac", "name": "a", "loss_overrides": {"ehco": {}}}),
        "loss_overrides key 'ehco'",
        "echo terms: echo",
    )


def test_loss_overrides_must_target_an_enabled_term():
    rejects(
        envs(
            {
                "id": "jac",
                "name": "a",
                "enabled_losses": ["rl"],
                "loss_overrides": {"echo": {"assistant": {"alpha": 0.1}}},
            }
        ),
        "overrides a term this env does not enable",
    )


def test_loss_overrides_must_give_a_valid_echo_term():
    rejects(
        envs({"id": "jac", "name": "a", "loss_overrides": {"echo": {"assistant": {"alpha": "lots"}}}}),
        "loss_overrides['echo'] gives an invalid echo term",
    )
    rejects(envs({"id": "jac", "name": "a", "loss_overrides": {"echo": {"assistant": {"alfa": 1}}}}), "alfa")
    rejects(
        envs({"id": "jac", "loss_overrides": {"echo": {"name": "other"}}}),
        "loss_overrides['echo'].name cannot be overridden",
    )


def test_loss_overrides_deep_merge_into_the_env_plan():
    config = load(
        envs(
            {"id": "jac", "name": "math", "enabled_losses": ["rl"]},
            {
                "id": "jac",
                "name": "chat",
                "loss_overrides": {"echo": {"assistant": {"alpha": 0.1}, "user": {"alpha": 2.0}}},
            },
            renderer="chat_template",
        )
    )
    plans = EnvLossPlans.from_config(config)
    assert plans["math"].names == ("rl",) and plans["math"].echo is None
    echo = plans["chat"].echo
    assert (echo.assistant.alpha, echo.user.alpha, echo.name) == (0.1, 2.0, "echo")
    assert config.losses[1].assistant.alpha == 0.5  # the shared term is untouched
    with pytest.raises(KeyError, match="'poetry' is not an orchestrator.train.env name"):
        plans["poetry"]


def test_echo_only_env_has_no_primary():
    config = load(envs({"id": "jac", "name": "a", "enabled_losses": ["echo"]}, {"id": "jac", "name": "b"}))
    plans = EnvLossPlans.from_config(config)
    assert not plans["a"].primary_enabled and plans["b"].primary_enabled


# ---------------------------------------------------------------------------------------------
# the renderer warning
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["system", "user", "tool"])
def test_prompt_role_echo_without_a_renderer_warns(role):
    with pytest.warns(LossConfigWarning, match=rf"prompt roles \['{role}'\].*orchestrator.renderer is None"):
        load({"losses": [{"type": "rl"}, {"type": "echo", role: {"alpha": 1.0}}]})


def test_no_warning_with_a_renderer_or_for_assistant_echo():
    with warnings.catch_warnings():
        warnings.simplefilter("error", LossConfigWarning)
        load({"losses": RL_ECHO})
        load(
            {
                "losses": [{"type": "rl"}, {"type": "echo", "user": {"alpha": 1.0}}],
                "orchestrator": {"renderer": "chat_template"},
            }
        )


def test_prompt_role_added_by_loss_overrides_without_a_renderer_warns_at_load():
    envs = [
        {"id": "jac", "name": "plain"},
        {"id": "jac", "name": "chatty", "loss_overrides": {"echo": {"user": {"alpha": 0.2}}}},
    ]
    with pytest.warns(LossConfigWarning) as caught:
        load({"losses": RL_ECHO, "orchestrator": {"train": {"env": envs}}})
    messages = [str(w.message) for w in caught if issubclass(w.category, LossConfigWarning)]
    assert len(messages) == 1
    assert "env[1] ('chatty')" in messages[0] and "prompt roles ['user']" in messages[0]


def test_assistant_only_overrides_do_not_warn():
    envs = [{"id": "jac", "loss_overrides": {"echo": {"assistant": {"alpha": 0.2}}}}]
    with warnings.catch_warnings():
        warnings.simplefilter("error", LossConfigWarning)
        load({"losses": RL_ECHO, "orchestrator": {"train": {"env": envs}}})


def test_sft_mode_forces_mito():
    with pytest.warns(LossConfigWarning, match="training_mode = 'sft' forces plain-text prompts"):
        config = load({"training_mode": "sft", "losses": RL_ECHO, "orchestrator": {"renderer": "chat_template"}})
    assert config.orchestrator.renderer is None


def test_sft_mode_with_a_prompt_role_echo_warns_that_it_selects_nothing():
    losses = [{"type": "echo", "name": "echo", "system": {"alpha": 1.0}}]
    with pytest.warns(LossConfigWarning) as caught:
        load({"training_mode": "sft", "losses": losses, "orchestrator": {"renderer": "chat_template"}})
    messages = [str(w.message) for w in caught]
    assert any("forces plain-text prompts" in m for m in messages)
    assert any("prompt roles ['system']" in m and "renderer is None" in m for m in messages)


def test_rl_mode_keeps_its_renderer():
    config = load({"losses": RL_ECHO, "orchestrator": {"renderer": "chat_template"}})
    assert config.orchestrator.renderer == "chat_template"


def test_standalone_orchestrator_config_validates_its_envs():
    with pytest.raises(pydantic.ValidationError, match="enabled_losses names 'nope'"):
        OrchestratorConfig.model_validate(
            {"losses": RL_ECHO, "train": {"env": [{"id": "jac", "name": "a", "enabled_losses": ["nope"]}]}}
        )


# ---------------------------------------------------------------------------------------------
# resuming
# ---------------------------------------------------------------------------------------------


def test_resume_with_the_same_terms_is_accepted():
    saved = dump_losses(parse_losses(RL_ECHO))
    check_resume_compatible(saved, load({"losses": RL_ECHO}).losses)


def test_resume_with_different_terms_is_rejected():
    saved = dump_losses(parse_losses(RL_ECHO))
    with pytest.raises(ValueError, match="term 'echo' is in the checkpoint but not in `losses`"):
        check_resume_compatible(saved, parse_losses([{"type": "rl"}]))
    with pytest.raises(ValueError, match=r"term 'rl' field `kl_tau`: checkpoint 0.001, config 0.5"):
        check_resume_compatible(saved, parse_losses([{"type": "rl", "kl_tau": 0.5}, RL_ECHO[1]]))
    with pytest.raises(ValueError, match="term 'ref_kl' is in `losses` but not in the checkpoint"):
        check_resume_compatible(saved, parse_losses(RL_ECHO + [{"type": "ref_kl"}]))
    with pytest.raises(ValueError, match="term order differs"):
        check_resume_compatible(saved, parse_losses(RL_ECHO[::-1]))


def test_echo_config_lists_its_roles_in_canonical_order():
    echo = EchoLossConfig.model_validate({"tool": {"alpha": 1}, "system": {"alpha": 2}})
    assert list(echo.roles()) == ["system", "tool"]
