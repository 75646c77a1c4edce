"""The config model: defaults, unknown keys, wrong types — each error names the key."""

import pytest
import yaml

from jacrl.config import Config, ConfigError, load_config


def test_default_config_file_validates(repo):
    cfg = load_config(yaml.safe_load((repo / "config.yaml").read_text()))
    assert isinstance(cfg, Config) and cfg.rungs == [1, 3, "all"]


def test_unknown_key_names_key_and_allowed_ones():
    with pytest.raises(ConfigError) as err:
        load_config({"splits": {"holdot_size": 3}})
    msg = str(err.value)
    assert "splits.holdot_size" in msg and "holdout_size" in msg and "valid_size" in msg


def test_unknown_top_level_key():
    with pytest.raises(ConfigError, match="unknown config key 'rungz'.*allowed keys under the top level"):
        load_config({"rungz": [1]})


def test_wrong_type_names_key():
    with pytest.raises(ConfigError, match="config key 'splits.decontam_threshold'"):
        load_config({"splits": {"decontam_threshold": "high"}})
    with pytest.raises(ConfigError, match="rungs"):
        load_config({"rungs": [0]})


def test_digest_changes_with_config():
    assert load_config({}).digest() != load_config({"threads": 1}).digest()
