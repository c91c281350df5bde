"""Hugging Face transformers integration: ``attn_implementation="dash"``.

    import dashattn.hf                                   # registers "dash" (attention and mask interfaces)
    cfg.dash_chunk_size, cfg.dash_gamma = 64, 1.0        # optional; defaults below
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="dash")
    dashattn.hf.attach_summary_queries(model)            # learned per-layer summary queries (zeros = mean pooling)
    model.generate(**batch)                              # prefill and cached decoding, left padding included

Configuration fields read from the model config (with their defaults): dash_chunk_size (64), dash_alpha (1.5),
dash_gamma (1.0), dash_sigma (1e8), dash_prior ("estimate_diagonal"; "raw" and "none" also accepted),
dash_solver ("exact"). The summary query of a layer is the parameter ``indexer_q`` ([h_kv * d], the released
model's name for it) on its attention module; layers without one use zeros.

Prefill and decoding both go through the forward with bottom-right causal alignment over the keys HF's cache
hands in (n_q <= n_k). Left-padded batches are converted to per-sequence offsets: each row attends exactly over its
own tokens, so a padded row equals the unpadded row; outputs at padding positions are zero. Right padding
(a right-padded prefill, or the unfilled end of a preallocated cache) runs as a padded batch with per-sequence
lengths.
"""

from __future__ import annotations

import contextlib
from typing import Dict, List, Optional

import torch
from torch import nn

from . import _api
from .errors import InvalidArgumentError, UnsupportedError
from .torch import dash_attention

__all__ = ["register", "dash_attention_forward", "attach_summary_queries", "configure", "record_routing",
           "DEFAULTS"]

DEFAULTS = {"dash_chunk_size": 64, "dash_alpha": 1.5, "dash_gamma": 1.0, "dash_sigma": 1e8,
            "dash_prior": "estimate_diagonal", "dash_solver": "exact"}

_recorders: List[list] = []


def configure(config, **fields) -> None:
    """Sets dash_* fields on a model config (keys with or without the 'dash_' prefix); unknown keys raise."""
    for key, value in fields.items():
        name = key if key.startswith("dash_") else "dash_" + key
        if name not in DEFAULTS:
            raise InvalidArgumentError(f"invalid argument '{key}': expected one of {sorted(DEFAULTS)}, got {key!r}")
        setattr(config, name, value)
    _method_of(config)  # validate now rather than at the first forward


def _setting(config, name):
    value = getattr(config, name, None)
    return DEFAULTS[name] if value is None else value


def _method_kwargs(config) -> dict:
    return {"chunk_size": int(_setting(config, "dash_chunk_size")), "alpha": float(_setting(config, "dash_alpha")),
            "gamma": float(_setting(config, "dash_gamma")), "sigma": float(_setting(config, "dash_sigma")),
            "prior": str(_setting(config, "dash_prior")), "solver": str(_setting(config, "dash_solver"))}


def _method_of(config):
    return _api.method(**_method_kwargs(config))


def _summary_query(module, n_kv: int, d: int, key_dtype: torch.dtype) -> Optional[torch.Tensor]:
    sq = getattr(module, "indexer_q", None)
    if sq is None:
        return None
    sq = sq.reshape(n_kv, d)
    return sq if sq.dtype in (key_dtype, torch.float32) else sq.to(key_dtype)


def _key_padding(attention_mask, b: int, n_k: int) -> Optional[torch.Tensor]:
    """Boolean [b, n_k] (True = real token) from the mask HF passes, or None when nothing is padded."""
    if attention_mask is None:
        return None
    m = attention_mask
    if m.dim() == 4:
        # A 4D causal mask (older transformers, or a custom mask creator): its last query row sees every
        # non-padded key, so that row is the padding mask.
        row = m[:, 0, -1, :]
        m = row if row.dtype == torch.bool else row == 0
    if m.dim() != 2:
        raise InvalidArgumentError(f"invalid argument 'attention_mask': expected a 2D padding mask [b, n_k] or a 4D "
                                   f"causal mask, got shape {list(attention_mask.shape)}")
    m = m[:, -n_k:].to(torch.bool)
    if m.shape != (b, n_k):
        raise InvalidArgumentError(f"invalid argument 'attention_mask': expected [b, n_k] = [{b}, {n_k}] (after "
                                   f"slicing to the keys), got {list(m.shape)}")
    if bool(m.all()):
        return None
    return m


def dash_attention_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: Optional[torch.Tensor], scaling: Optional[float] = None,
                           dropout: float = 0.0, sliding_window: Optional[int] = None,
                           softcap: Optional[float] = None, **kwargs):
    """The attention function registered as "dash": query [b, h_q, n_q, d], key/value [b, h_kv, n_k, d]
    (HF's layout) -> (output [b, n_q, h_q, d], None)."""
    if dropout:
        raise UnsupportedError(f"dash attention has no dropout (got dropout={dropout}); use model.eval()")
    if sliding_window is not None:
        raise UnsupportedError("dash attention does not combine with sliding-window layers")
    if softcap is not None:
        raise UnsupportedError("dash attention does not support attention-logit soft-capping")
    if not getattr(module, "is_causal", True):
        raise UnsupportedError("dash attention is causal; this attention module is not (is_causal=False)")
    config = module.config
    kw = _method_kwargs(config)
    b, h_q, n_q, d = query.shape
    n_kv, n_k = key.shape[1], key.shape[2]
    sq = _summary_query(module, n_kv, d, key.dtype)
    keep = _key_padding(attention_mask, b, n_k)
    common = dict(layout="bhnd", scale=scaling, **kw)

    if keep is None:
        out = _attend(module, query, key, value, sq, n_q, n_k, common)
        return out, None

    lengths = keep.sum(dim=1)
    pos = torch.arange(n_k, device=keep.device)
    if torch.equal(keep, pos[None, :] >= (n_k - lengths)[:, None]):
        # Left padding (generate): row s holds its tokens in the last lengths[s] key positions. Each row runs
        # over its own keys only, with its own chunk grid starting at its first real token.
        out = query.new_zeros(b, n_q, h_q, d)
        for s, length in enumerate(lengths.tolist()):
            pad = n_k - length
            first_q = max(0, pad - (n_k - n_q))  # queries before it sit on padding
            if first_q >= n_q or length == 0:
                continue
            out[s:s + 1, first_q:] = _attend(module, query[s:s + 1, :, first_q:], key[s:s + 1, :, pad:],
                                             value[s:s + 1, :, pad:], sq, n_q - first_q, length, common)
        return out, None
    if torch.equal(keep, pos[None, :] < lengths[:, None]):
        # Right padding: a right-padded prefill batch (queries past a row's length are padding too), or unfilled
        # slots at the end of a preallocated cache (the queries are the row's last real tokens). Both are the
        # padded-batch form with per-sequence lengths; rows past seqlens_q come back as zeros.
        seqlens_k = lengths.to(torch.int32)
        seqlens_q = torch.clamp(seqlens_k, max=n_q)
        out = _attend(module, query, key, value, sq, n_q, n_k, common, seqlens_q=seqlens_q, seqlens_k=seqlens_k)
        return out, None
    raise InvalidArgumentError("invalid argument 'attention_mask': expected left or right padding, got a padding "
                               "mask with holes")


def _attend(module, q, k, v, sq, n_q, n_k, common, **batch):
    if _recorders:
        out_bhnd, routing = _api.forward(q, k, v, sq, return_routing=True, **common, **batch)
        stats = routing.stats()
        for rec in _recorders:
            rec.append({"layer": getattr(module, "layer_idx", None), "n_q": n_q, "n_k": n_k, **stats})
        return out_bhnd.transpose(1, 2)
    return dash_attention(q, k, v, sq, out_layout="bnhd", **common, **batch)


@contextlib.contextmanager
def record_routing():
    """Collects routing statistics of every dash attention call inside the block (layer index, n_q, n_k,
    sparsity, mean active chunks, per KV head) into the yielded list. Costs a host copy per call."""
    records: List[Dict] = []
    _recorders.append(records)
    try:
        yield records
    finally:
        _recorders.remove(records)


def attach_summary_queries(model: nn.Module, dtype: Optional[torch.dtype] = None) -> int:
    """Gives every attention module of a transformers model a learned summary query ``indexer_q``
    ([num_key_value_heads * head_dim], zero-initialized as in the paper; a checkpoint's indexer_q then loads
    into it). Returns the number of modules that got one."""
    count = 0
    for module in model.modules():
        config = getattr(module, "config", None)
        head_dim = getattr(module, "head_dim", None)
        if config is None or head_dim is None or not hasattr(module, "k_proj"):
            continue
        if getattr(module, "indexer_q", None) is not None:
            continue
        n_kv = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        ref = module.k_proj.weight
        module.indexer_q = nn.Parameter(torch.zeros(n_kv * head_dim, device=ref.device, dtype=dtype or ref.dtype))
        count += 1
    return count


def register(name: str = "dash") -> None:
    """Registers the attention function (and, where transformers has one, the padding-mask creator FlashAttention
    uses: a 2D mask, or None when nothing is padded) under `name`."""
    try:
        from transformers import AttentionInterface
    except ImportError:  # transformers < 4.48
        from transformers.modeling_utils import AttentionInterface
    AttentionInterface.register(name, dash_attention_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask
    except ImportError:  # older transformers pass a 4D mask, which _key_padding also reads
        return
    AttentionMaskInterface.register(name, flash_attention_mask)


register()
