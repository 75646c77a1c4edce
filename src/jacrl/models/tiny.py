"""Build the embedded tiny Jac model: a byte-level BPE tokenizer and a tiny Qwen2 causal LM.

`build_tiny_model` reads the pre-training corpus — jaclang's own installed `.jac` sources plus
the train-pool drivers it is given (never a glob of dataset/drivers, so a holdout driver cannot
slip in) — trains the tokenizer on it, pre-trains the model briefly with next-token loss and
saves a Hugging Face folder that both backends load:

    config.json  model.safetensors  tokenizer.json  tokenizer_config.json  (chat template)
    generation_config.json  jacrl_tiny.json (config + every corpus file and its sha256)
    metrics.jsonl (step, loss, lr, tokens_per_s)
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jacrl.backends.cpu import float32_through_onednn
from jacrl.io import atomic_dir
from jacrl.models.config import (
    CHAT_TEMPLATE,
    END_OF_TEXT,
    EOS_TOKEN,
    IM_START,
    MANIFEST,
    SPECIAL_TOKENS,
    TinyModelConfig,
)
from jacrl.progress import Progress, summary
from jacrl.tasks.record import read_tasks
from jacrl.training.metrics import MetricsWriter
from jacrl.training.schedule import lr_at


class CorpusError(ValueError):
    """The pre-training corpus would break the holdout (or names a file that does not exist)."""


@dataclass(frozen=True)
class CorpusFile:
    path: str
    kind: str  # "driver" (a train-pool driver) or "jaclang" (an installed jaclang source)
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def jaclang_jac_files() -> list[Path]:
    """Every `.jac` file shipped inside the installed jaclang package, sorted."""
    import jaclang

    root = Path(jaclang.__file__).parent
    return sorted(p for p in root.rglob("*.jac") if ".jac/cache" not in p.as_posix())


def driver_paths_from_tasks(tasks_jsonl: str | Path, root: str | Path = ".") -> list[Path]:
    """The distinct `driver` files of a task list (e.g. trainpool.jsonl), in first-seen order."""
    seen: dict[str, None] = {}
    for task in read_tasks(tasks_jsonl):
        seen.setdefault(task.driver, None)
    return [Path(root) / d for d in seen]


def _same_file(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def pretraining_corpus(
    train_driver_paths: Sequence[str | Path],
    cfg: TinyModelConfig,
    holdout_driver_paths: Sequence[str | Path] = (),
    library_files: Sequence[Path] | None = None,
) -> list[CorpusFile]:
    """The documents the tiny model is pre-trained on: the given train-pool drivers, whole, then
    jaclang's own sources in a seeded order up to `cfg.corpus_chars` characters.

    Raises CorpusError if a train driver is also a holdout driver, or if any holdout driver's
    text turns up in the corpus.
    """
    holdout = [Path(p) for p in holdout_driver_paths]
    docs: list[CorpusFile] = []
    for raw in dict.fromkeys(str(p) for p in train_driver_paths):
        p = Path(raw)
        if not p.is_file():
            raise CorpusError(f"train-pool driver {p} does not exist")
        if any(_same_file(p, h) for h in holdout if h.exists()):
            raise CorpusError(f"{p} is listed both as a train-pool driver and as a holdout driver")
        # Fenced as prompts show files, so fences are tokens the model has seen.
        docs.append(CorpusFile(p.as_posix(), "driver", "```jac\n" + p.read_text(encoding="utf-8") + "```\n"))

    library = list(jaclang_jac_files() if library_files is None else library_files)
    random.Random(cfg.seed).shuffle(library)
    budget = cfg.corpus_chars
    for p in library:
        if budget <= 0:
            break
        text = p.read_text(encoding="utf-8", errors="replace")
        if not text.strip():
            continue
        docs.append(CorpusFile(p.as_posix(), "jaclang", text[:budget]))
        budget -= len(text)

    holdout_texts = {h.as_posix(): h.read_text(encoding="utf-8").strip() for h in holdout if h.is_file()}
    for doc in docs:
        for name, text in holdout_texts.items():
            if text and text in doc.text:
                raise CorpusError(f"holdout driver {name} appears inside pre-training file {doc.path}")
    return docs


def train_tokenizer(texts: Iterable[str], vocab_size: int, model_max_length: int = 4096):
    """A byte-level BPE tokenizer (no unknown tokens) with ChatML special tokens and template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=END_OF_TEXT,
        additional_special_tokens=[IM_START],
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
    )


def qwen2_shape(cfg: TinyModelConfig) -> dict[str, Any]:
    """The tiny model's Qwen2 architecture but its vocabulary: tied embeddings, RoPE θ = 10000."""
    return {
        "hidden_size": cfg.width,
        "intermediate_size": int(round(cfg.width * cfg.mlp_ratio / 8)) * 8,
        "num_hidden_layers": cfg.depth,
        "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.kv_heads,
        "max_position_embeddings": cfg.max_positions,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
    }


def qwen2_config(cfg: TinyModelConfig, tokenizer):
    """The tiny model's Qwen2 config over `tokenizer`'s vocabulary and special tokens."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(tokenizer),
        **qwen2_shape(cfg),
        eos_token_id=tokenizer.convert_tokens_to_ids(EOS_TOKEN),
        pad_token_id=tokenizer.convert_tokens_to_ids(END_OF_TEXT),
        bos_token_id=None,
    )


def _lr_at(step: int, cfg: TinyModelConfig) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    return lr_at(step, cfg.lr, cfg.warmup_steps, cfg.pretrain_steps, "cosine", floor=0.1)


def _token_streams(docs: list[CorpusFile], tokenizer) -> dict[str, list[int]]:
    eot = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    streams: dict[str, list[int]] = {"driver": [], "jaclang": []}
    encoded = tokenizer.backend_tokenizer.encode_batch([d.text for d in docs], add_special_tokens=False)
    for doc, enc in zip(docs, encoded):
        streams[doc.kind].extend(enc.ids)
        streams[doc.kind].append(eot)
    return streams


def pretrain(
    model, streams: dict[str, list[int]], cfg: TinyModelConfig, metrics: MetricsWriter | None = None
) -> list[float]:
    """Next-token pre-training on random windows; a `driver_fraction` share comes from drivers."""
    import torch
    import torch.nn.functional as F

    rng = random.Random(cfg.seed)
    usable = {k: v for k, v in streams.items() if len(v) > 1}
    if not usable:
        raise CorpusError("the pre-training corpus is empty")
    span = cfg.seq_len + 1

    def window(stream: list[int]) -> list[int]:
        if len(stream) < span:  # a short stream is repeated to fill the window
            stream = stream * (span // len(stream) + 1)
        start = rng.randrange(len(stream) - span + 1)
        return stream[start : start + span]

    def pick() -> list[int]:
        use_driver = "driver" in usable and ("jaclang" not in usable or rng.random() < cfg.driver_fraction)
        return window(usable["driver" if use_driver else "jaclang"])

    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )
    model.train()
    losses: list[float] = []
    t0 = time.perf_counter()
    bar = Progress(range(cfg.pretrain_steps), desc="tiny pre-train", unit="step")
    for step in bar:
        lr = _lr_at(step, cfg)
        for group in opt.param_groups:
            group["lr"] = lr
        tic = time.perf_counter()
        batch = torch.tensor([pick() for _ in range(cfg.batch_size)], dtype=torch.long)
        with float32_through_onednn(model.device.type):
            logits = model(input_ids=batch[:, :-1]).logits
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), batch[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        value = loss.item()
        losses.append(value)
        dt = time.perf_counter() - tic
        tokens = cfg.batch_size * cfg.seq_len
        bar.set_postfix(loss=f"{value:.3f}")
        if metrics is not None:
            metrics.log(step=step + 1, loss=value, lr=lr, tokens_per_s=tokens / dt, elapsed_s=time.perf_counter() - t0)
    model.eval()
    return losses


def patch_config_for_mlx(out_dir: Path) -> None:
    """transformers 5 keeps RoPE θ under `rope_parameters`; mlx-lm reads top-level `rope_theta`
    (and would silently default to 1e6). Write it at the top level too."""
    path = out_dir / "config.json"
    conf = json.loads(path.read_text())
    theta = (conf.get("rope_parameters") or {}).get("rope_theta", conf.get("rope_theta", 10000.0))
    conf["rope_theta"] = theta
    path.write_text(json.dumps(conf, indent=2, sort_keys=True) + "\n")


def build_tiny_model(
    out_dir: str | Path,
    train_driver_paths: Sequence[str | Path],
    cfg: TinyModelConfig | None = None,
    threads: int | None = None,
    holdout_driver_paths: Sequence[str | Path] = (),
) -> Path:
    """Build, pre-train and save the tiny model into `out_dir` (atomically). Returns `out_dir`.

    `train_driver_paths` are the only drivers read (take them from trainpool.jsonl with
    `driver_paths_from_tasks`); `holdout_driver_paths`, when given, are checked to be absent.
    """
    import torch
    from transformers import GenerationConfig, Qwen2ForCausalLM

    from jacrl.backends.cpu import set_threads

    cfg = cfg or TinyModelConfig()
    set_threads(threads)
    t_start = time.perf_counter()
    docs = pretraining_corpus(train_driver_paths, cfg, holdout_driver_paths)
    # Drivers first: with a small vocabulary, merges follow the Jac we actually ask for.
    tokenizer = train_tokenizer((d.text for d in docs), cfg.vocab_size, cfg.max_positions)
    streams = _token_streams(docs, tokenizer)
    t_tok = time.perf_counter() - t_start

    torch.manual_seed(cfg.seed)
    model = Qwen2ForCausalLM(qwen2_config(cfg, tokenizer))
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        with MetricsWriter(tmp / "metrics.jsonl") as metrics:
            losses = pretrain(model, streams, cfg, metrics)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        GenerationConfig(
            eos_token_id=model.config.eos_token_id, pad_token_id=model.config.pad_token_id
        ).save_pretrained(tmp)
        patch_config_for_mlx(tmp)
        manifest = {
            "config": cfg.model_dump(),
            "parameters": sum(p.numel() for p in model.parameters()),
            "tokens": {k: len(v) for k, v in streams.items()},
            "final_loss": losses[-1] if losses else None,
            "seconds": {"tokenizer_and_encode": round(t_tok, 2), "total": round(time.perf_counter() - t_start, 2)},
            "corpus": [{"path": d.path, "kind": d.kind, "chars": len(d.text), "sha256": d.sha256} for d in docs],
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    if losses:
        summary(
            f"{manifest['parameters'] / 1e6:.1f} M parameters, {len(losses)} pre-training steps; "
            f"loss {losses[0]:.3f} → {losses[-1]:.3f}"
        )
    return out_dir


def read_manifest(model_dir: str | Path) -> dict:
    """The `jacrl_tiny.json` a tiny-model build wrote (config, corpus files, timings)."""
    return json.loads((Path(model_dir) / MANIFEST).read_text())
