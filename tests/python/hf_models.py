"""Tiny randomly initialized Llama models for the transformers tests (CPU and GPU)."""

import copy

import torch


def tiny_llama_pair(device="cpu", dtype=torch.float32, seed=0, **dash):
    """(dash model, sdpa model) with identical weights; dash settings go on the config as dash_* fields."""
    import dashattn.hf  # noqa: F401  registers attn_implementation="dash"
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                      initializer_range=0.08, pad_token_id=0, bos_token_id=1, eos_token_id=None)
    for key, value in dash.items():
        setattr(cfg, "dash_" + key, value)
    # Each model gets its own config: from_config records the attention implementation on the config object.
    dash_model = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="dash",
                                                  dtype=dtype).to(device).eval()
    sdpa_model = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="sdpa",
                                                  dtype=dtype).to(device).eval()
    assert dash_model.config._attn_implementation == "dash"
    sdpa_model.load_state_dict(dash_model.state_dict())
    return dash_model, sdpa_model


def left_padded_batch(device, lengths, total, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 256, (len(lengths), total), generator=g)
    mask = torch.zeros(len(lengths), total, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :total - n] = 0
        mask[i, total - n:] = 1
    return ids.to(device), mask.to(device)


def generate(model, ids, mask, new_tokens):
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False,
                              min_new_tokens=new_tokens, pad_token_id=0)


def assert_same_tokens(a, b, ref_model, ids, mask):
    """Greedy tokens must agree; a disagreement is only tolerated where the reference's top-2 logits tie
    within bf16 noise at the first diverging position of that row, and is reported."""
    if torch.equal(a, b):
        return
    differs = a != b
    first = int(differs.any(dim=0).nonzero()[0])
    rows = differs[:, first].nonzero().flatten()
    # The reference's logits for exactly the prefix both runs shared, with the real padding mask and the
    # positions generate() derives from it (left-padded rows start counting at their first real token).
    full_mask = torch.cat([mask, torch.ones(b.shape[0], b.shape[1] - mask.shape[1], dtype=mask.dtype,
                                            device=mask.device)], dim=1)[rows, :first]
    positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = ref_model(input_ids=b[rows, :first], attention_mask=full_mask,
                           position_ids=positions).logits[:, -1]
    top2 = logits.float().topk(2, dim=-1).values
    gap = float((top2[:, 0] - top2[:, 1]).max())
    assert gap < 0.05, (f"generation diverged at position {first} (rows {rows.tolist()}) with a top-2 logit gap "
                        f"of {gap:.4f}")
    print(f"greedy tokens diverged at position {first} (rows {rows.tolist()}) at a near-tie (top-2 gap {gap:.4f})")
