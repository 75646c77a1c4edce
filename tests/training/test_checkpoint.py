"""The checkpoint shared by gold-SFT and GRPO, without a model: its folder, its state file, resuming
under the same identity, starting over under another, and when a run saves and stops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jacrl.training.checkpoint import Cadence, Checkpoint, Stopped, checkpoint_path


class FolderBackend:
    """Writes marker files where a backend writes its adapter and optimiser."""

    def save_adapter(self, path: Path) -> None:
        path.mkdir(parents=True)
        (path / "adapter.txt").write_text("weights")

    def save_optimizer(self, path: Path) -> None:
        path.mkdir(parents=True)
        (path / "optimizer.txt").write_text("moments")


def refuse(state: dict) -> None:
    raise ValueError("refused")


def test_the_default_folder_is_beside_the_output(tmp_path):
    assert checkpoint_path(tmp_path / "sft") == tmp_path / "sft.ckpt"
    assert checkpoint_path(tmp_path / "sft", tmp_path / "elsewhere") == tmp_path / "elsewhere"


def test_a_saved_checkpoint_resumes_under_its_identity(tmp_path):
    ckpt = Checkpoint(tmp_path / "run.ckpt", {"identity": {"model": "m"}}, "model")
    assert ckpt.resume() is None
    rows = [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}, {"step": 3, "loss": 1.0}]
    ckpt.save(2, FolderBackend(), rows, {"losses": [2.0, 1.5]})
    assert list(json.loads((ckpt.path / "state.json").read_text())) == ["step", "losses", "identity"]
    assert (ckpt.adapter / "adapter.txt").is_file() and (ckpt.optimizer / "optimizer.txt").is_file()
    assert not ckpt.reference.exists()
    saved = ckpt.resume()
    assert saved is not None and saved.step == 2 and saved.state["losses"] == [2.0, 1.5]
    assert saved.rows == rows[:2]  # rows past the saved step are not restored
    ckpt.restore_rng()


def test_a_kept_reference_is_copied_in(tmp_path):
    reference = tmp_path / "start"
    reference.mkdir()
    (reference / "adapter_config.json").write_text("{}")
    ckpt = Checkpoint(tmp_path / "run.ckpt", {"grpo": {}}, "settings")
    ckpt.save(1, FolderBackend(), [], {}, reference)
    assert (ckpt.reference / "adapter_config.json").read_text() == "{}"


def test_another_identity_starts_over_and_check_can_refuse(tmp_path):
    Checkpoint(tmp_path / "run.ckpt", {"grpo": {"lr": 1}}, "GRPO settings").save(1, FolderBackend(), [], {"losses": []})
    with pytest.raises(ValueError, match="refused"):
        Checkpoint(tmp_path / "run.ckpt", {"grpo": {"lr": 2}}, "GRPO settings", check=refuse).resume()
    assert (tmp_path / "run.ckpt").exists()  # a refused checkpoint is kept
    with pytest.warns(UserWarning, match="run.ckpt: GRPO settings changed since the checkpoint; starting over"):
        assert Checkpoint(tmp_path / "run.ckpt", {"grpo": {"lr": 2}}, "GRPO settings").resume() is None
    assert not (tmp_path / "run.ckpt").exists()


def test_cadence_saves_every_few_steps_but_the_last_and_stops_when_asked():
    saved: list[int] = []
    for step in range(1, 7):
        Cadence(iters=6, save_every=2).after(step, saved.append)
    assert saved == [2, 4]
    resumed = Cadence(iters=6, save_every=2, start=2, stop_after=2)
    resumed.after(3, saved.append)
    with pytest.raises(Stopped):
        resumed.after(4, saved.append)
    assert saved == [2, 4, 4]  # the step that stops the run is saved first
    Cadence(iters=6, save_every=2, start=4, stop_after=2).after(6, saved.append)  # the last step never stops
