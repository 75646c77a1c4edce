"""The torch backend: transformers + peft, on CUDA, MPS or CPU (picked automatically)."""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from jacrl.backends.base import (
    Backend,
    Completion,
    Draw,
    LoraSpec,
    LossFn,
    PromptForwards,
    SamplingParams,
    TokenLogprobs,
    TokenRows,
    TrainingState,
)
from jacrl.backends.config import BackendOptions
from jacrl.backends.cpu import (
    float32_through_onednn,
    set_threads,
)
from jacrl.backends.decode.calls import CallLog
from jacrl.backends.decode.trunk import Trunk
from jacrl.backends.devices import resolve_device, resolve_dtype
from jacrl.backends.hf import causal_lm_of, enable_checkpointing
from jacrl.backends.lora_format import PEFT_PREFIX, adapter_format, finish_peft_config, read_adapter
from jacrl.backends.model_files import require_model_dir, safetensors_parameters
from jacrl.backends.sampling import (
    MAX_BATCH_ROWS,
)
from jacrl.backends.torch_sampling import TorchSampler
from jacrl.backends.torch_scoring import TorchScorer


class TorchBackend(Backend):
    name = "torch"
    swaps_runs = True

    def __init__(
        self,
        model_path: str | Path,
        adapter_path: str | Path | None = None,
        threads: int | None = None,
        model_name: str | None = None,
        options: BackendOptions | None = None,
        max_batch_rows: int = MAX_BATCH_ROWS,
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        set_threads(threads)
        self.options = options = options or BackendOptions()
        self.model_path = require_model_dir(model_path, model_name)
        self.device = resolve_device(options.device)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        params = safetensors_parameters(self.model_path)
        self.dtype = resolve_dtype(options.dtype, self.device, params, options.training)
        base = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=self.dtype)
        base.to(self.device).eval()
        for p in base.parameters():
            p.requires_grad_(False)
        if options.gradient_checkpointing:  # transformers applies it in train mode only: sampling is unaffected
            enable_checkpointing(base)
        self.model: Any = base
        self.lora: LoraSpec | None = None
        self.adapter_path = None
        self._opt = None
        self._max_grad_norm: float | None = 1.0
        self._reference: dict[str, Any] | None = None
        self._weights_version = 0
        """Counts the changes of the weights: prompt forwards made under another are stale."""
        self.trunk = Trunk(options.trunk, self._n_layers, self.model_path, self.device) if options.trunk else None
        """The frozen trunk (`options.trunk`): the lower layers' passes kept on disk (`decode.trunk`)."""
        self.sampler = TorchSampler(self, max_batch_rows)
        """The sampling part: the merged copy and each call's decode (`jacrl.backends.torch_sampling`)."""
        self.scorer = TorchScorer(self, options.autocast)
        """The scoring part: log-probs, the forwards' precision, the kept prompts (`jacrl.backends.torch_scoring`)."""
        if adapter_path is not None:
            self.load_adapter(adapter_path)

    # ---- text --------------------------------------------------------------------------------
    @property
    def hf_tokenizer(self) -> Any:
        return self.tokenizer

    @property
    def eos_token_ids(self) -> set[int]:
        """The tokens that end a row: none under `options.ends: cap` (every row runs to its cap)."""
        return set() if self.options.ends == "cap" else super().eos_token_ids

    @property
    def _n_layers(self) -> int:
        return int(self._causal_lm().config.num_hidden_layers)

    def _causal_lm(self) -> Any:
        """The transformers CausalLM (peft injects LoRA into it in place)."""
        return causal_lm_of(self.model)

    def _policy_moved(self) -> None:
        """The adapter's weights changed: the sampling copy is refolded before the next decode, and
        prompt forwards made under the old weights are stale (`PromptForwards.version`)."""
        self.sampler.copy_stale = True
        self._weights_version += 1

    # ---- sampling (the sampler part) ---------------------------------------------------------
    def sample_for_training(
        self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams
    ) -> tuple[list[list[Completion]], PromptForwards | None]:
        return self.sampler.sample_for_training(prompts, n, params)

    def generate_draws_ids(
        self,
        prompts: Sequence[Sequence[int]],
        draws: Sequence[Draw],
        progress: bool = True,
        keep: PromptForwards | None = None,
        calls: CallLog | None = None,
    ) -> list[list[list[Completion]]]:
        return self.sampler.generate_draws_ids(prompts, draws, progress, keep, calls)

    # ---- scoring (the scorer part) -----------------------------------------------------------
    gives_distributions = True

    @property
    def autocasts(self) -> bool:
        return self.scorer.autocasts

    @property
    def shares_prompt_forwards(self) -> bool:
        return self.scorer.shares_prompt_forwards

    def logprobs(
        self, prompt_ids: TokenRows, completion_ids: TokenRows, temperature: float = 1.0, adapter: bool = True
    ) -> list[np.ndarray]:
        return self.scorer.logprobs(prompt_ids, completion_ids, temperature, adapter)

    def log_distributions(self, prompt_ids: TokenRows, completion_ids: TokenRows, temperature: float) -> Any:
        return self.scorer.log_distributions(prompt_ids, completion_ids, temperature)

    # ---- training ----------------------------------------------------------------------------
    def _trainable(self) -> list[Any]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def configure_optimizer(self, lr: float, weight_decay: float = 0.0, max_grad_norm: float | None = 1.0) -> None:
        import torch

        self._unmerged("train")
        params = self._trainable()
        if not params:
            raise RuntimeError("no trainable parameters: attach or load a LoRA adapter (trainable=True) first")
        self._opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
        self._max_grad_norm = max_grad_norm

    def backward(
        self,
        prompt_ids: TokenRows,
        completion_ids: TokenRows,
        temperature: float,
        loss_fn: LossFn,
        reference: bool = False,
        distributions: bool = False,
        prompt_forwards: PromptForwards | None = None,
    ) -> dict[str, float]:
        import torch

        ref, t0 = None, time.perf_counter()
        if reference:
            with torch.no_grad(), self.reference_policy():
                ref, _, _ = self.scorer.token_logprobs(
                    prompt_ids, completion_ids, temperature, kept=self.scorer.reference_prompts
                )
        timing = {"time/reference_s": time.perf_counter() - t0} if reference else {}
        self.model.train()
        lp, mask, log_dists = self.scorer.token_logprobs(
            prompt_ids, completion_ids, temperature, distributions, forwards=prompt_forwards
        )
        loss, metrics = loss_fn(TokenLogprobs(lp, mask, ref, log_dists))
        with float32_through_onednn(self.device), self._recomputing():
            loss.backward()
        self.model.eval()
        return {"loss": float(loss.detach()), **metrics, **timing}

    def _recomputing(self) -> Any:
        """Where activation checkpointing recomputes layers in the backward: under `prompt_rows`'
        attention, which rows scored after a shared prompt attended through (and sdpa's for the rest)."""
        from jacrl.backends import prompt_rows

        return prompt_rows.attending(self._causal_lm()) if self.scorer.checkpoints_prompts() else nullcontext()

    def _step(self, lr: float | None) -> float | None:
        import torch

        if lr is not None:
            for group in self._opt.param_groups:
                group["lr"] = lr
        grads = [p for p in self._trainable() if p.grad is not None]
        norm = None
        if grads:  # an infinite bound measures the norm without clipping
            norm = float(torch.nn.utils.clip_grad_norm_(grads, self._max_grad_norm or float("inf")))
        self._opt.step()
        self._opt.zero_grad(set_to_none=True)
        self._policy_moved()
        return norm

    def _save_optimizer(self, path: Path) -> None:
        import torch

        torch.save({"state": self._opt.state_dict(), "max_grad_norm": self._max_grad_norm}, path / "optimizer.pt")

    def _load_optimizer(self, path: Path) -> None:
        import torch

        saved = torch.load(path / "optimizer.pt", map_location=self.device)
        self._opt.load_state_dict(saved["state"])
        self._max_grad_norm = saved["max_grad_norm"]

    # ---- LoRA --------------------------------------------------------------------------------
    def _peft_config(self, spec: LoraSpec, target_modules: list[str] | None = None) -> Any:
        """peft's LoraConfig for `spec`: suffix names + layers_to_transform when keys are given;
        `all-linear` for every layer; else the explicit linear modules of the chosen layers."""
        from peft import LoraConfig

        n = self._n_layers
        layer_ids = spec.layer_ids(n)
        layers_to_transform = None
        if target_modules is None and spec.keys:
            target_modules = sorted({k.split(".")[-1] for k in spec.keys})
            layers_to_transform = None if len(layer_ids) == n else layer_ids
        elif target_modules is None and len(layer_ids) == n:
            target_modules = "all-linear"
        elif target_modules is None:
            target_modules = self._block_linears(set(layer_ids))
        return LoraConfig(
            r=spec.rank,
            lora_alpha=spec.scale * spec.rank,
            lora_dropout=spec.dropout,
            target_modules=target_modules,
            layers_to_transform=layers_to_transform,
            bias="none",
            task_type="CAUSAL_LM",
        )

    def _block_linears(self, layer_ids: set[int]) -> list[str]:
        """Full names of the nn.Linear modules inside transformer blocks `layer_ids`."""
        import torch

        out = []
        for name, mod in self._causal_lm().named_modules():
            m = re.search(r"(?:^|\.)layers\.(\d+)\.", name)
            if m and int(m.group(1)) in layer_ids and isinstance(mod, torch.nn.Linear):
                out.append(name)
        return out

    def _attach_lora(self, spec: LoraSpec, seed: int) -> None:
        import torch
        from peft import get_peft_model

        torch.manual_seed(seed)
        self.model = get_peft_model(self.model, self._peft_config(spec))
        self.model.eval()
        self._above_the_trunk(f"a fresh adapter on the last {spec.layers} layers")

    def _save_adapter(self, path: Path) -> None:
        self.model.save_pretrained(path)
        finish_peft_config(path, self.model_path)

    def _load_adapter(self, path: Path, trainable: bool) -> LoraSpec:
        import torch
        from peft import PeftModel, get_peft_model

        if adapter_format(path) == "peft":
            self.model = PeftModel.from_pretrained(self.model, path, is_trainable=trainable)
            spec = read_adapter(path).spec
        else:  # an MLX adapter: same matrices, transposed, under peft's names
            neutral = read_adapter(path)
            modules = sorted(neutral.weights)
            self.model = get_peft_model(self.model, self._peft_config(neutral.spec, target_modules=modules))
            state = {}
            for m, (a, b) in neutral.weights.items():
                state[f"base_model.model.{m}.lora_A.default.weight"] = torch.from_numpy(a)
                state[f"base_model.model.{m}.lora_B.default.weight"] = torch.from_numpy(b)
            missing = set(state) - set(self.model.state_dict())
            if missing:
                raise ValueError(f"{path}: adapter modules not in the model: {sorted(missing)[:3]} …")
            self.model.load_state_dict(state, strict=False)
            for name, p in self.model.named_parameters():
                p.requires_grad_(trainable and "lora_" in name)
            spec = neutral.spec
        self.model.to(self.device).eval()
        self._above_the_trunk(f"adapter {path}")
        return spec

    def _above_the_trunk(self, adapter: str) -> None:
        """Refuse an adapter with a layer below the trunk's top K (`options.trunk`): the trunk holds those fixed."""
        if self.trunk is None:
            return
        layers = (
            re.search(r"(?:^|\.)layers\.(\d+)\.", name) for name, _ in self.model.named_parameters() if ".lora_" in name
        )
        below = sorted({int(m.group(1)) for m in layers if m and self.trunk.reaches(int(m.group(1)))})
        if below:
            raise ValueError(
                f"trunk: {adapter} trains layer {below[0]}, below the top {self.trunk.top} of {self._n_layers} "
                "that the trunk leaves trainable (lora.layers)"
            )

    def _fuse(self, out_dir: Path) -> None:
        copy.deepcopy(self.model).merge_and_unload().save_pretrained(out_dir)
        _drop_stale_weights(out_dir)

    def _merge_adapter(self) -> None:
        self.model = self.model.merge_and_unload()
        self.sampler.copy, self.sampler.fold_on_pack = None, False
        self._weights_version += 1
        self.scorer.reference_prompts.clear()  # the base the reference stood on has changed

    @contextmanager
    def adapter_disabled(self) -> Iterator[None]:
        if self.lora is None:
            yield
            return
        self._unmerged("disable the adapter")
        with self.model.disable_adapter(), self.sampler.live_model():
            yield

    def _lora_shapes(self) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
        params = dict(self.model.named_parameters())
        shapes = {}
        for name, a in params.items():
            if name.endswith(".lora_A.default.weight"):
                module = name.removeprefix(PEFT_PREFIX).removesuffix(".lora_A.default.weight")
                shapes[module] = (tuple(a.shape), tuple(params[name.replace(".lora_A.", ".lora_B.")].shape))
        return shapes

    def _native_weights(self, weights: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, Any]:
        """Tensors under the adapter's parameter names, on its device and in its dtype."""
        import torch

        params = dict(self.model.named_parameters())
        kept = {}
        for module, (a, b) in weights.items():
            for part, w in (("lora_A", a), ("lora_B", b)):
                name = f"{PEFT_PREFIX}{module}.{part}.default.weight"
                kept[name] = torch.from_numpy(w).to(params[name].device, params[name].dtype)
        return kept

    def training_state(self) -> TrainingState:
        import torch

        return TrainingState(
            self.lora_weights(), self._opt, self._max_grad_norm, self._reference, torch.get_rng_state()
        )

    def restore_training_state(self, state: TrainingState) -> None:
        import torch

        self.set_lora_weights(state.weights)
        self._opt, self._max_grad_norm, self._reference = state.optimizer, state.max_grad_norm, state.reference
        torch.set_rng_state(state.rng)

    def lora_weights(self) -> dict[str, Any]:
        """A copy of the adapter's current LoRA matrices (what `set_lora_weights` puts back)."""
        return {name: p.detach().clone() for name, p in self.model.named_parameters() if ".lora_" in name}

    def set_lora_weights(self, weights: dict[str, Any]) -> None:
        """Copy `weights` (from `lora_weights` or `adapter_weights`) into the adapter, in place: the
        parameters stay the same objects, so an optimiser made over them still holds them."""
        import torch

        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, w in weights.items():
                params[name].copy_(w)
        self._policy_moved()

    @contextmanager
    def _kept_reference(self) -> Iterator[None]:
        """The kept weights stand in for the trained ones for the block, so one adapter serves both
        policies: each parameter's data is swapped, not written over, so a graph made before the
        block (a prompt forward kept by `options.share_prompts`) still holds the weights it saved."""
        params = dict(self.model.named_parameters())
        trained = {name: params[name].data for name in self._reference}
        for name, w in self._reference.items():
            params[name].data = w
        try:
            with self.sampler.live_model():
                yield
        finally:
            for name, w in trained.items():
                params[name].data = w


def _drop_stale_weights(out_dir: Path) -> None:
    """A fused folder written by save_pretrained has one index or one file; keep it consistent."""
    index = out_dir / "model.safetensors.index.json"
    if index.exists() and (out_dir / "model.safetensors").exists():
        names = set(json.loads(index.read_text())["weight_map"].values())
        if "model.safetensors" not in names:
            (out_dir / "model.safetensors").unlink()
