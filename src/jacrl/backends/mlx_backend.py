"""The MLX backend: mlx-lm models, LoRA layers, gradients and fuse (Metal on Apple Silicon,
`mlx[cpu]` elsewhere).

Losses are torch code, SFT's as GRPO's (`training.sft.run_sft` drives both backends; neither
mlx-lm's trainer nor `mlx_lm_lora`'s SFT mode is used, the latter crashes on CPU, docs/design.md#measured-facts):
`backward` evaluates the per-token logprobs in MLX, lets torch compute the loss and its gradient
g w.r.t. those logprobs, and pulls g back through MLX with the surrogate Σ ℓ·g (two MLX forwards
per step; dropout masks are made identical by reseeding).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from functools import partial
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
    check_draws,
)
from jacrl.backends.decode.calls import CallLog
from jacrl.backends.lora_format import MLX_WEIGHTS, adapter_format, read_adapter
from jacrl.backends.model_files import require_model_dir
from jacrl.backends.rows import pad_right
from jacrl.backends.sampling import RowLayout, at_temperature
from jacrl.progress import Progress


class MLXBackend(Backend):
    name = "mlx"

    def __init__(
        self,
        model_path: str | Path,
        adapter_path: str | Path | None = None,
        threads: int | None = None,
        model_name: str | None = None,
    ):
        from mlx_lm.utils import load_model
        from transformers import AutoTokenizer

        # MLX has no intra-op thread setting on CPU; `threads` is accepted for a uniform API.
        self.threads = threads
        self.model_path = require_model_dir(model_path, model_name)
        self.model, self.config = load_model(self.model_path)
        self.model.eval()
        self.model.freeze()
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.lora: LoraSpec | None = None
        self.adapter_path = None
        self._opt: Any = None
        self._grads: Any = None
        self._max_grad_norm: float | None = 1.0
        self._reference: dict[str, tuple[Any, Any]] | None = None
        self._pass = 0
        if adapter_path is not None:
            self.load_adapter(adapter_path)

    @property
    def hf_tokenizer(self) -> Any:
        return self.tokenizer

    # ---- sampling ----------------------------------------------------------------------------
    def generate_draws_ids(
        self,
        prompts: Sequence[Sequence[int]],
        draws: Sequence[Draw],
        progress: bool = True,
        *,
        calls: CallLog | None = None,
    ) -> list[list[list[Completion]]]:
        """A call a prompt (logged to `calls` as one, where given)."""
        max_tokens, layout = check_draws(draws), RowLayout.of(draws)
        rows = layout.block
        out: list[list[list[Completion]]] = [[] for _ in draws]
        bar = Progress(total=len(prompts) * rows, desc=f"sample ({self.name})", unit="seq", disable=not progress)
        for i, prompt in enumerate(prompts):
            sample = partial(self._sample_call, list(prompt), draws, i, max_tokens)
            got = calls.through([prompt], [i], draws, sample) if calls else sample()
            for d, done in enumerate(layout.split(got[0][0], got[1][0], self._finish)):
                out[d].append(done)
            bar.update(rows)
        bar.close()
        return out

    def _sample_call(
        self, prompt: list[int], draws: Sequence[Draw], i: int, max_tokens: int
    ) -> tuple[list[list[list[int]]], list[list[list[float]]]]:
        """`_sample` as a call of one prompt (`decode.calls.Rows`: [prompt][row][token])."""
        ids, lps = self._sample(prompt, draws, i, max_tokens)
        return [ids], [lps]

    def _prefill(self, prompt: list[int], rows: int) -> tuple[Any, Any]:
        """The prompt's cache copied once per row, and each row's next-token logits."""
        import mlx.core as mx
        from mlx_lm.models.cache import KVCache, make_prompt_cache

        cache = make_prompt_cache(self.model)
        if not all(type(c) is KVCache for c in cache):  # caches that cannot be copied: one prompt per row
            return cache, self.model(mx.array([prompt] * rows), cache=cache)[:, -1, :]
        logits = self.model(mx.array([prompt]), cache=cache)[:, -1, :]
        if rows > 1:
            for c in cache:
                k, v, off = c.state
                c.state = (mx.repeat(k, rows, axis=0), mx.repeat(v, rows, axis=0), off)
            logits = mx.repeat(logits, rows, axis=0)
        return cache, logits

    def _sample(
        self, prompt: list[int], draws: Sequence[Draw], i: int, max_tokens: int
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Every draw's rows of one prompt decoded together; draw d's rows split its own key (seed + i) each step."""
        import mlx.core as mx

        layout = RowLayout.of(draws)
        rows = layout.block
        if rows == 0:
            return [], []
        cache, logits = self._prefill(prompt, rows)
        eos = sorted(self.eos_token_ids)
        eos_arr = mx.array(eos)
        keys = [mx.random.key(d.params.seed + i) for d in draws]
        tokens: list[np.ndarray] = []
        logps: list[np.ndarray] = []
        done = np.zeros(rows, dtype=bool)
        for _ in range(max_tokens):
            parts = []
            for d, draw in enumerate(draws):
                keys[d], sub = mx.random.split(keys[d])
                parts.append(_choose(logits[layout.rows(0, d)].astype(mx.float32), draw.params, sub))
            tok = mx.concatenate([t for t, _ in parts])
            lp = mx.concatenate([p for _, p in parts])
            tok = mx.where(mx.array(done), eos_arr[0], tok)
            mx.eval(tok, lp)
            t_np = np.array(tok)
            tokens.append(t_np)
            logps.append(np.array(lp))
            done |= np.isin(t_np, eos)
            if done.all():
                break
            logits = self.model(tok[:, None], cache=cache)[:, -1, :]
        if not tokens:
            return [[] for _ in range(rows)], [[] for _ in range(rows)]
        return np.stack(tokens, axis=1).tolist(), np.stack(logps, axis=1).astype(np.float64).tolist()

    # ---- scoring -----------------------------------------------------------------------------
    def _row_logprobs(self, model: Any, prompt: Sequence[int], completion: Sequence[int], temperature: float) -> Any:
        """Logprobs [C] of one completion's tokens given its prompt, as an MLX array (the row run whole)."""
        import mlx.core as mx

        seq = mx.array([list(prompt) + list(completion)])
        p, c = len(prompt), len(completion)
        logits = model(seq[:, :-1])[0, p - 1 : p - 1 + c, :].astype(mx.float32)
        return _token_logprobs(logits, mx.array(list(completion)), temperature)

    def _shared_logprobs(
        self, model: Any, prompt: Sequence[int], completions: Sequence[Sequence[int]], temperature: float
    ) -> list[Any]:
        """Logprobs of rows that share `prompt`, as the torch backend scores a group: one forward of
        the prompt, its KV cache repeated once per row, then the rows' completions (right-padded) on
        top of it. Gradients reach the prompt's forward through the cache. A model whose cache
        cannot be copied (sliding windows, recurrent layers) runs every row whole."""
        import mlx.core as mx
        from mlx_lm.models.cache import KVCache, make_prompt_cache

        cache = make_prompt_cache(model)
        if len(completions) == 1 or not all(type(c) is KVCache for c in cache):
            return [self._row_logprobs(model, prompt, c, temperature) for c in completions]
        rows = len(completions)
        tails = mx.array(pad_right(completions, self.pad_token_id))
        logits = mx.repeat(model(mx.array([list(prompt)]), cache=cache)[:, -1:, :], rows, axis=0)  # predicts token 0
        if tails.shape[1] > 1:  # tokens 0 … n-2 predict tokens 1 … n-1
            for c in cache:
                k, v, offset = c.state
                c.state = (mx.repeat(k, rows, axis=0), mx.repeat(v, rows, axis=0), offset)
            logits = mx.concatenate([logits, model(tails[:, :-1], cache=cache)], axis=1)
        lp = _token_logprobs(logits.astype(mx.float32), tails, temperature)
        return [lp[r, : len(c)] for r, c in enumerate(completions)]

    def _group_logprobs(
        self, model: Any, prompt_ids: TokenRows, completion_ids: TokenRows, temperature: float, group: list[int]
    ) -> list[Any]:
        """The rows `group` (one prompt) of a batch, scored with their prompt shared."""
        return self._shared_logprobs(model, prompt_ids[group[0]], [completion_ids[i] for i in group], temperature)

    def logprobs(
        self, prompt_ids: TokenRows, completion_ids: TokenRows, temperature: float = 1.0, adapter: bool = True
    ) -> list[np.ndarray]:
        import mlx.core as mx

        out: list[np.ndarray | None] = [None] * len(completion_ids)
        with self.adapter_disabled() if not adapter else nullcontext():
            for group in prompt_groups(prompt_ids, completion_ids):
                lps = self._group_logprobs(self.model, prompt_ids, completion_ids, temperature, group)
                mx.eval(lps)
                for i, lp in zip(group, lps):
                    out[i] = np.array(lp, dtype=np.float32)
        return out  # type: ignore[return-value]

    # ---- training ----------------------------------------------------------------------------
    def configure_optimizer(self, lr: float, weight_decay: float = 0.0, max_grad_norm: float | None = 1.0) -> None:
        import mlx.optimizers as optim

        if self.lora is None:
            raise RuntimeError("no trainable parameters: attach or load a LoRA adapter (trainable=True) first")
        self._unmerged("train")
        self._opt = optim.AdamW(learning_rate=lr, weight_decay=weight_decay, bias_correction=True)
        self._max_grad_norm = max_grad_norm
        self._grads = None

    def backward(
        self,
        prompt_ids: TokenRows,
        completion_ids: TokenRows,
        temperature: float,
        loss_fn: LossFn,
        reference: bool = False,
        distributions: bool = False,
        prompt_forwards: PromptForwards | None = None,  # MLX keeps none (`shares_prompt_forwards`)
    ) -> dict[str, float]:
        import mlx.core as mx
        import mlx.nn as nn
        import torch
        from mlx.utils import tree_map

        if distributions:
            raise NotImplementedError(
                "the mlx backend does not give whole next-token distributions; "
                "under training_mode opd set estimator: sampled (opd.core in the ladder's config)"
            )
        rows = list(zip(prompt_ids, completion_ids))
        T = max(len(c) for _, c in rows)
        mask = np.zeros((len(rows), T), dtype=bool)
        for i, (_, c) in enumerate(rows):
            mask[i, : len(c)] = True
        ref = None
        if reference:
            with self.reference_policy():
                ref_rows = self.logprobs(prompt_ids, completion_ids, temperature)
            ref = torch.from_numpy(_pad(ref_rows, T))

        self._pass += 1
        self.model.train()
        groups = prompt_groups(prompt_ids, completion_ids)
        values: list[np.ndarray | None] = [None] * len(rows)
        for n, group in enumerate(groups):
            mx.random.seed(self._pass * 100_003 + n)  # same dropout masks in both passes
            lps = self._group_logprobs(self.model, prompt_ids, completion_ids, temperature, group)
            mx.eval(lps)
            for i, lp in zip(group, lps):
                values[i] = np.array(lp, dtype=np.float32)
        lp_t = torch.from_numpy(_pad(values, T)).requires_grad_(True)
        loss, metrics = loss_fn(TokenLogprobs(lp_t, torch.from_numpy(mask), ref))
        loss.backward()
        g = lp_t.grad.detach().float().numpy()

        for n, group in enumerate(groups):
            weights = [mx.array(g[i, : len(completion_ids[i])]) for i in group]
            if not any(np.any(g[i, : len(completion_ids[i])]) for i in group):
                continue

            def surrogate(model: Any, group=group, weights=weights) -> Any:
                lps = self._group_logprobs(model, prompt_ids, completion_ids, temperature, group)
                return sum((lp * w).sum() for lp, w in zip(lps, weights))

            mx.random.seed(self._pass * 100_003 + n)
            _, grads = nn.value_and_grad(self.model, surrogate)(self.model)
            self._grads = grads if self._grads is None else tree_map(lambda a, b: a + b, self._grads, grads)
            mx.eval(self._grads)
        self.model.eval()
        return {"loss": float(loss.detach()), **metrics}

    def _step(self, lr: float | None) -> float | None:
        import mlx.core as mx
        import mlx.optimizers as optim

        if self._grads is None:
            return None
        if lr is not None:
            self._opt.learning_rate = lr
        # an infinite bound measures the norm without clipping
        grads, norm = optim.clip_grad_norm(self._grads, self._max_grad_norm or float("inf"))
        self._opt.update(self.model, grads)
        mx.eval(self.model.parameters(), self._opt.state)
        self._grads = None
        return float(norm)

    def _save_optimizer(self, path: Path) -> None:
        import mlx.core as mx
        from mlx.utils import tree_flatten

        mx.save_safetensors(str(path / "optimizer.safetensors"), dict(tree_flatten(self._opt.state)))
        (path / "optimizer.json").write_text(json.dumps({"max_grad_norm": self._max_grad_norm}) + "\n")

    def _load_optimizer(self, path: Path) -> None:
        import mlx.core as mx
        from mlx.utils import tree_unflatten

        self._opt.state = tree_unflatten(list(mx.load(str(path / "optimizer.safetensors")).items()))
        self._max_grad_norm = json.loads((path / "optimizer.json").read_text())["max_grad_norm"]

    # ---- LoRA --------------------------------------------------------------------------------
    def _lora_modules(self) -> list[tuple[str, Any]]:
        from mlx_lm.tuner.lora import LoRALinear

        return [(n, m) for n, m in self.model.named_modules() if isinstance(m, LoRALinear)]

    def _attach_lora(self, spec: LoraSpec, seed: int) -> None:
        import mlx.core as mx
        from mlx_lm.tuner.utils import linear_to_lora_layers

        mx.random.seed(seed)
        self.model.freeze()
        linear_to_lora_layers(self.model, len(spec.layer_ids(len(self.model.layers))), self._lora_parameters(spec))
        self.model.eval()

    def _adapter_config(self) -> dict:
        spec = self.lora
        assert spec is not None
        return {
            "fine_tune_type": "lora",
            "num_layers": len(spec.layer_ids(len(self.model.layers))),
            "lora_parameters": self._lora_parameters(spec),
        }

    @staticmethod
    def _lora_parameters(spec: LoraSpec) -> dict:
        params = {"rank": spec.rank, "scale": spec.scale, "dropout": spec.dropout}
        if spec.keys:
            params["keys"] = list(spec.keys)
        return params

    def _save_adapter(self, path: Path) -> None:
        import mlx.core as mx
        from mlx.utils import tree_flatten

        weights = {k: v for k, v in tree_flatten(self.model.parameters()) if k.endswith((".lora_a", ".lora_b"))}
        mx.save_safetensors(str(path / MLX_WEIGHTS), weights)
        (path / "adapter_config.json").write_text(json.dumps(self._adapter_config(), indent=2) + "\n")

    def _load_adapter(self, path: Path, trainable: bool) -> LoraSpec:
        import mlx.core as mx
        from mlx.utils import tree_unflatten
        from mlx_lm.tuner.lora import LoRALinear
        from mlx_lm.tuner.utils import load_adapters

        neutral = read_adapter(path)
        if adapter_format(path) == "mlx":
            load_adapters(self.model, str(path))
        else:  # a peft adapter: same matrices, transposed, under mlx-lm's names
            spec = neutral.spec
            modules = dict(self.model.named_modules())
            swaps = []
            for name, (a, b) in neutral.weights.items():
                if name not in modules:
                    raise ValueError(f"{path}: adapter module {name} is not in the model")
                lora = LoRALinear.from_base(modules[name], r=spec.rank, dropout=spec.dropout, scale=spec.scale)
                lora.lora_a = mx.array(a.T)
                lora.lora_b = mx.array(b.T)
                swaps.append((name, lora))
            self.model.update_modules(tree_unflatten(swaps))
        self.model.freeze()
        if trainable:
            for _, m in self._lora_modules():
                m.unfreeze(keys=["lora_a", "lora_b"], recurse=False)
        mx.eval(self.model.parameters())
        self.model.eval()
        return neutral.spec

    def _fuse(self, out_dir: Path) -> None:
        from mlx.utils import tree_unflatten
        from mlx_lm.utils import save_model

        loras = self._lora_modules()
        self._merge_adapter()
        try:
            save_model(out_dir, self.model, donate_model=False)
        finally:
            self.model.update_modules(tree_unflatten(loras))

    def _merge_adapter(self) -> None:
        from mlx.utils import tree_unflatten

        self.model.update_modules(tree_unflatten([(n, m.fuse()) for n, m in self._lora_modules()]))

    @contextmanager
    def adapter_disabled(self) -> Iterator[None]:
        self._unmerged("disable the adapter")
        loras = self._lora_modules()
        scales = [m.scale for _, m in loras]
        for _, m in loras:
            m.scale = 0.0  # y + 0·BAx = y exactly
        try:
            yield
        finally:
            for (_, m), s in zip(loras, scales):
                m.scale = s

    def _lora_shapes(self) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
        """mlx-lm keeps A and B transposed (lora_a [in, r], lora_b [r, out])."""
        return {name: (tuple(m.lora_a.shape)[::-1], tuple(m.lora_b.shape)[::-1]) for name, m in self._lora_modules()}

    def _native_weights(self, weights: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, tuple[Any, Any]]:
        """(lora_a, lora_b) per module, transposed into mlx-lm's layout and its dtype."""
        import mlx.core as mx

        loras = dict(self._lora_modules())
        kept = {}
        for module, (a, b) in weights.items():
            m = loras[module]
            kept[module] = (mx.array(a.T).astype(m.lora_a.dtype), mx.array(b.T).astype(m.lora_b.dtype))
        return kept

    @contextmanager
    def _kept_reference(self) -> Iterator[None]:
        """The kept matrices replace the trained ones for the block (MLX arrays are swapped, not copied)."""
        loras = dict(self._lora_modules())
        trained = {name: (m.lora_a, m.lora_b) for name, m in loras.items()}
        for name, (a, b) in self._reference.items():
            loras[name].lora_a, loras[name].lora_b = a, b
        try:
            yield
        finally:
            for name, (a, b) in trained.items():
                loras[name].lora_a, loras[name].lora_b = a, b


def prompt_groups(prompt_ids: TokenRows, completion_ids: TokenRows) -> list[list[int]]:
    """Row indices grouped by prompt, in order of first appearance (a GRPO group shares one)."""
    if len(prompt_ids) != len(completion_ids):
        raise ValueError("prompt_ids and completion_ids differ in length")
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(prompt_ids):
        groups.setdefault(tuple(p), []).append(i)
    return list(groups.values())


def _token_logprobs(logits: Any, targets: Any, temperature: float) -> Any:
    """log p(target) per position of float32 `logits` [..., V] at `temperature`."""
    import mlx.core as mx

    logits = at_temperature(logits, temperature)
    logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    return mx.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]


def _pad(rows: Sequence[np.ndarray], T: int) -> np.ndarray:
    out = np.zeros((len(rows), T), dtype=np.float32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _choose(logits: Any, params: SamplingParams, key: Any) -> tuple[Any, Any]:
    """Pick the next token per row; return it and its logprob at the sampling temperature."""
    import mlx.core as mx

    if params.temperature <= 0:
        logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        tok = mx.argmax(logp, axis=-1)
        return tok, mx.take_along_axis(logp, tok[:, None], axis=-1)[:, 0]
    scaled = at_temperature(logits, params.temperature)
    logp = scaled - mx.logsumexp(scaled, axis=-1, keepdims=True)
    masked = logp
    if params.top_p < 1.0:
        order = mx.argsort(-logp, axis=-1)
        sorted_lp = mx.take_along_axis(logp, order, axis=-1)
        sorted_p = mx.exp(sorted_lp)
        drop = (mx.cumsum(sorted_p, axis=-1) - sorted_p) >= params.top_p
        sorted_lp = mx.where(drop, -mx.inf, sorted_lp)
        masked = mx.put_along_axis(mx.full(logp.shape, -mx.inf), order, sorted_lp, axis=-1)
    tok = mx.random.categorical(masked, axis=-1, key=key)
    return tok, mx.take_along_axis(logp, tok[:, None], axis=-1)[:, 0]
