"""The torch backend: transformers + peft, on CUDA, MPS or CPU (picked automatically)."""

from __future__ import annotations

import copy
import inspect
import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from jacrl.backends.base import (
    Backend,
    Completion,
    LoraSpec,
    LossFn,
    SamplingParams,
    SFTExample,
    StepInfo,
    TokenLogprobs,
    batch_order,
    copy_model_files,
    pad_right,
    require_model_dir,
    set_threads,
    sft_lr,
)
from jacrl.backends.config import SFTConfig
from jacrl.backends.lora_format import adapter_format, read_adapter, write_meta


SMALL_MODEL_PARAMS = 50_000_000
"""Below this many parameters, CPU decoding runs on one thread (see `_decode_threads`)."""


def pick_device() -> str:
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


class TorchBackend(Backend):
    name = "torch"

    def __init__(
        self,
        model_path: str | Path,
        adapter_path: str | Path | None = None,
        threads: int | None = None,
        device: str | None = None,
        dtype: str = "auto",
        model_name: str | None = None,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        set_threads(threads)
        self.model_path = require_model_dir(model_path, model_name)
        self.device = device or pick_device()
        if dtype == "auto":
            torch_dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
        else:
            torch_dtype = getattr(torch, dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        base = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch_dtype)
        base.to(self.device).eval()
        for p in base.parameters():
            p.requires_grad_(False)
        self.model: Any = base
        self.lora: LoraSpec | None = None
        self.adapter_path = None
        self._opt = None
        self._max_grad_norm: float | None = 1.0
        self._n_params: int | None = None
        if adapter_path is not None:
            self.load_adapter(adapter_path)

    # ---- text --------------------------------------------------------------------------------
    @property
    def hf_tokenizer(self) -> Any:
        return self.tokenizer

    @property
    def _n_layers(self) -> int:
        return int(self._causal_lm().config.num_hidden_layers)

    def _causal_lm(self) -> Any:
        """The transformers CausalLM (peft injects LoRA into it in place)."""
        return self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model

    # ---- sampling ----------------------------------------------------------------------------
    def generate_ids(
        self, prompts: Sequence[Sequence[int]], n: int = 1, params: SamplingParams = SamplingParams(), progress: bool = True
    ) -> list[list[Completion]]:
        import torch

        out: list[list[Completion]] = []
        bar = tqdm(total=len(prompts) * n, desc=f"sample ({self.name})", unit="seq", disable=not progress)
        for i, prompt in enumerate(prompts):
            gen = torch.Generator(device="cpu").manual_seed(params.seed + i)
            ids, lps = self._sample(list(prompt), n, params, gen)
            out.append([self._finish(a, b) for a, b in zip(ids, lps)])
            bar.update(n)
        bar.close()
        return out

    def _sample(self, prompt: list[int], n: int, params: SamplingParams, gen: Any) -> tuple[list[list[int]], list[list[float]]]:
        """Prefill the prompt once, copy its KV cache n times, then decode the n rows together."""
        import torch
        from transformers import DynamicCache

        lm = self._causal_lm()
        with torch.inference_mode():
            cache = DynamicCache(config=lm.config)
            kw = {_cache_kwarg(lm): cache, "use_cache": True}
            logits = self.model(input_ids=torch.tensor([prompt], device=self.device), **kw).logits[:, -1, :].float()
            if n > 1:
                cache.batch_repeat_interleave(n)
                logits = logits.expand(n, -1)
            with self._decode_threads():
                tokens, logps = self._decode(logits, params, gen, kw)
        return tokens.tolist(), logps.tolist()

    def _decode(self, logits: Any, params: SamplingParams, gen: Any, kw: dict) -> tuple[Any, Any]:
        import torch

        n = logits.shape[0]
        eos = torch.tensor(sorted(self.eos_token_ids))
        tokens, logps = [], []
        done = torch.zeros(n, dtype=torch.bool)
        for _ in range(params.max_tokens):
            tok, lp = _choose(logits.cpu(), params, gen)
            tok = torch.where(done, eos[0], tok)
            tokens.append(tok)
            logps.append(lp)
            done |= torch.isin(tok, eos)
            if bool(done.all()):
                break
            logits = self.model(input_ids=tok[:, None].to(self.device), **kw).logits[:, -1, :].float()
        if not tokens:
            return torch.empty((n, 0), dtype=torch.long), torch.empty((n, 0))
        return torch.stack(tokens, dim=1), torch.stack(logps, dim=1)

    @contextmanager
    def _decode_threads(self) -> Iterator[None]:
        """One intra-op thread while decoding a small model on CPU: each step's matmuls are
        tiny, and waking threads costs more than it saves (measured 2× faster on 2 cores;
        10× or more when the cores are shared with other jobs)."""
        import torch

        if self._n_params is None:
            self._n_params = sum(p.numel() for p in self._causal_lm().parameters())
        if self.device != "cpu" or self._n_params >= SMALL_MODEL_PARAMS or torch.get_num_threads() == 1:
            yield
            return
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    # ---- scoring -----------------------------------------------------------------------------
    def _token_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], temperature: float
    ) -> tuple[Any, Any]:
        """[B, T] logprobs of the completion tokens (graph kept if grad is enabled) and mask."""
        import torch

        if len(prompt_ids) != len(completion_ids):
            raise ValueError("prompt_ids and completion_ids differ in length")
        seqs = [list(p) + list(c) for p, c in zip(prompt_ids, completion_ids)]
        p_len = [len(p) for p in prompt_ids]
        c_len = [len(c) for c in completion_ids]
        T = max(c_len)
        x = torch.tensor(pad_right(seqs, self.pad_token_id), device=self.device)
        # Right padding needs no attention mask: causal attention never looks ahead. Only the
        # positions that predict completion tokens go through the output layer.
        first = min(p_len) - 1
        last = max(p + c for p, c in zip(p_len, c_len)) - 1
        keep = torch.arange(first, last, device=self.device)
        logits = self.model(input_ids=x, logits_to_keep=keep).logits.float()
        if temperature != 1.0:
            logits = logits / max(temperature, 1e-6)
        lse = torch.logsumexp(logits, dim=-1)  # [B, last-first]; no full log-softmax copy
        j = torch.arange(T, device=self.device)
        rows = []
        for b in range(len(seqs)):
            pos = (p_len[b] - 1 - first + j).clamp(max=logits.shape[1] - 1)
            tgt = x[b, (p_len[b] + j).clamp(max=x.shape[1] - 1)]
            rows.append(logits[b, pos].gather(-1, tgt[:, None])[:, 0] - lse[b, pos])
        mask = (j[None, :] < torch.tensor(c_len, device=self.device)[:, None])
        lp = torch.stack(rows) * mask
        return lp, mask

    def logprobs(
        self,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        temperature: float = 1.0,
        adapter: bool = True,
    ) -> list[np.ndarray]:
        import torch

        ctx = nullcontext() if adapter else self.adapter_disabled()
        with torch.inference_mode(), ctx:
            lp, _ = self._token_logprobs(prompt_ids, completion_ids, temperature)
        lp = lp.float().cpu().numpy()
        return [lp[i, : len(c)].copy() for i, c in enumerate(completion_ids)]

    # ---- training ----------------------------------------------------------------------------
    def _trainable(self) -> list[Any]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def configure_optimizer(self, lr: float, weight_decay: float = 0.0, max_grad_norm: float | None = 1.0) -> None:
        import torch

        params = self._trainable()
        if not params:
            raise RuntimeError("no trainable parameters: attach or load a LoRA adapter (trainable=True) first")
        self._opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
        self._max_grad_norm = max_grad_norm

    def backward(
        self,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        temperature: float,
        loss_fn: LossFn,
        reference: bool = False,
    ) -> dict[str, float]:
        import torch

        ref = None
        if reference:
            with torch.no_grad(), self.adapter_disabled():
                ref, _ = self._token_logprobs(prompt_ids, completion_ids, temperature)
        self.model.train()
        lp, mask = self._token_logprobs(prompt_ids, completion_ids, temperature)
        loss, metrics = loss_fn(TokenLogprobs(lp, mask, ref))
        loss.backward()
        self.model.eval()
        return {"loss": float(loss.detach()), **metrics}

    def step(self, lr: float | None = None) -> None:
        import torch

        if self._opt is None:
            raise RuntimeError("call configure_optimizer() before step()")
        if lr is not None:
            for group in self._opt.param_groups:
                group["lr"] = lr
        if self._max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self._trainable(), self._max_grad_norm)
        self._opt.step()
        self._opt.zero_grad(set_to_none=True)

    def save_optimizer(self, path: str | Path) -> Path:
        import torch

        if self._opt is None:
            raise RuntimeError("no optimiser to save")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        torch.save({"state": self._opt.state_dict(), "max_grad_norm": self._max_grad_norm}, path / "optimizer.pt")
        return path

    def load_optimizer(self, path: str | Path) -> None:
        import torch

        if self._opt is None:
            raise RuntimeError("call configure_optimizer() before load_optimizer()")
        saved = torch.load(Path(path) / "optimizer.pt", map_location=self.device)
        self._opt.load_state_dict(saved["state"])
        self._max_grad_norm = saved["max_grad_norm"]

    def train_sft(
        self, examples: Sequence[SFTExample], cfg: SFTConfig, on_step: Callable[[StepInfo], None] | None = None
    ) -> list[float]:
        if self.lora is None:
            raise RuntimeError("attach_lora() before train_sft()")
        examples = [e.truncated(cfg.max_seq) for e in examples]
        self.configure_optimizer(cfg.lr)
        losses: list[float] = []

        def nll(t: TokenLogprobs) -> tuple[Any, dict[str, float]]:
            return -(t.logprobs * t.mask).sum() / t.mask.sum(), {}

        bar = tqdm(
            enumerate(batch_order(len(examples), cfg.batch, cfg.iters, cfg.seed)),
            total=cfg.iters,
            desc=f"sft ({self.name})",
            unit="step",
        )
        for step, idx in bar:
            tic = time.perf_counter()
            batch = [examples[i] for i in idx]
            lr = sft_lr(step, cfg)
            out = self.backward([e.prompt_ids for e in batch], [e.completion_ids for e in batch], 1.0, nll)
            self.step(lr)
            tokens = sum(len(e.prompt_ids) + len(e.completion_ids) for e in batch)
            losses.append(out["loss"])
            bar.set_postfix(loss=f"{out['loss']:.3f}")
            if on_step is not None:
                dt = time.perf_counter() - tic
                on_step(StepInfo(step + 1, out["loss"], lr, tokens / dt, tokens))
        return losses

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

    def attach_lora(self, spec: LoraSpec, seed: int = 0) -> None:
        import torch
        from peft import get_peft_model

        if self.lora is not None:
            raise RuntimeError("this backend already has a LoRA adapter")
        torch.manual_seed(seed)
        self.model = get_peft_model(self.model, self._peft_config(spec))
        self.model.eval()
        self.lora = spec

    def save_adapter(self, path: str | Path) -> Path:
        if self.lora is None:
            raise RuntimeError("no adapter to save")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path)
        write_meta(path, self.name, self.lora, self.model_path)
        return path

    def load_adapter(self, path: str | Path, trainable: bool = False) -> None:
        import torch
        from peft import PeftModel, get_peft_model

        if self.lora is not None:
            raise RuntimeError("this backend already has a LoRA adapter")
        path = Path(path)
        if adapter_format(path) == "peft":
            self.model = PeftModel.from_pretrained(self.model, path, is_trainable=trainable)
            self.lora = read_adapter(path).spec
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
            self.lora = neutral.spec
        self.model.to(self.device).eval()
        self.adapter_path = path

    def fuse(self, out_dir: str | Path) -> Path:
        if self.lora is None:
            raise RuntimeError("no adapter to fuse")
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        merged = copy.deepcopy(self.model).merge_and_unload()
        merged.save_pretrained(out_dir)
        # The base's config and tokenizer files are the truth (transformers may rewrite keys
        # that mlx-lm reads, e.g. rope_theta); only the weights change.
        copy_model_files(self.model_path, out_dir)
        _drop_stale_weights(out_dir)
        return out_dir

    @contextmanager
    def adapter_disabled(self) -> Iterator[None]:
        if self.lora is None:
            yield
            return
        with self.model.disable_adapter():
            yield


def _cache_kwarg(lm: Any) -> str:
    """transformers ≥ 5.2x calls the KV cache argument `cache`; older ones `past_key_values`."""
    return "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"


def _drop_stale_weights(out_dir: Path) -> None:
    """A fused folder written by save_pretrained has one index or one file; keep it consistent."""
    index = out_dir / "model.safetensors.index.json"
    if index.exists() and (out_dir / "model.safetensors").exists():
        names = set(json.loads(index.read_text())["weight_map"].values())
        if "model.safetensors" not in names:
            (out_dir / "model.safetensors").unlink()


def _choose(logits: Any, params: SamplingParams, gen: Any) -> tuple[Any, Any]:
    """Pick the next token per row; return it and its logprob at the sampling temperature."""
    import torch

    if params.temperature <= 0:
        logp = torch.log_softmax(logits, dim=-1)
        tok = logp.argmax(dim=-1)
        return tok, logp.gather(-1, tok[:, None])[:, 0]
    logp = torch.log_softmax(logits / params.temperature, dim=-1)
    probs = logp.exp()
    if params.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        cum = sorted_p.cumsum(-1)
        drop = (cum - sorted_p) >= params.top_p  # keeps the smallest prefix reaching top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    tok = torch.multinomial(probs, 1, generator=gen)[:, 0]
    return tok, logp.gather(-1, tok[:, None])[:, 0]
