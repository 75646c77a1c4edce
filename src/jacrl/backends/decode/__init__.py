"""Decoding, as one package: the torch backend's sampling calls `plan` for a call's path, fills a cache
from each prompt's prefill, and runs the one loop over it.

- `cache`: a prompt's keys and values (`PromptKV`, what every prefill gives) and the two layouts a
  decode holds them in (`SlotCache`: one row a prompt, streamed through slots; `PrefixCache`: a prompt's
  cache once under its rows), one protocol (`DecodeCache`: attend, narrow, nbytes) and one bytes formula (`kv_bytes`, which a
  job's memory is derived from too).
- `steps`: what computes a step over a cache: the fast step (`FastDecoder`, packed weights), the
  transformers hook (`next_logits` inside `decoding_with`), plain or compiled; `FAMILIES`.
- `loop`: the loop (`decode`) over a call's rows (`Stream`, `Groups`) and the token chooser
  (`TokenChooser`).
- `plan`: which rows and step a call takes, logged once a call.
- `calls`: a decode's finished calls logged on disk (`CallLog`), so that a killed eval job resumes.
- `trunk`: the frozen trunk, a prompt's (and a training row's) pass through the layers below the
  adapters', made once and kept on disk (`Trunk`, `TrunkStore`).
"""
