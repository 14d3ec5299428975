"""The GPT family: GPT-3's architecture (learned positions, LayerNorm, GELU MLP, biases, tied embeddings). Its values
are the catalog's field defaults, so their sources are the catalog's `SOURCES`, and it adds none of its own."""

from __future__ import annotations

from typing import Any, Optional

from nemo_recipes.errors import Problem
from nemo_recipes.families.architecture import Architecture
from nemo_recipes.families.family import Family, values_not_held


class GPT2Mapping:
    """GPT-3's recipe as transformers' GPT2LMHeadModel, both ways. GPT-2 stores its linear layers as `Conv1D`
    ([in, out], the transpose of Megatron's [out, in]) and its attention projection as queries, keys and values
    concatenated, where Megatron interleaves them per head. Its GELU is `gelu_new`, the tanh approximation: the one
    Megatron computes too, since the recipes fuse bias and GELU (training/model.py `fusion_values`) and Megatron's
    fused bias-GELU is that approximation (megatron/core/fusions/fused_bias_gelu.py)."""

    architecture = "GPT2LMHeadModel"
    model_type = "gpt2"

    def problems(self, spec: Any) -> list[Problem]:
        """What GPT2LMHeadModel cannot express, each with the recipe field, its value and the fix."""
        wanted = {
            "position_embedding_type": ("learned_absolute", "it has a learned position table only"),
            "normalization": ("LayerNorm", "its norms are LayerNorm"),
            "activation": ("gelu", "its MLP is one GELU layer, not gated"),
            "add_bias_linear": (True, "every linear layer of it has a bias"),
            "share_embeddings": (True, "its output layer is the word embeddings"),
            "qk_layernorm": (False, "it has no norm of queries and keys"),
        }
        if spec.kv_groups != spec.num_attention_heads:
            wanted["num_query_groups"] = (None, "its attention has one key and value head per query head")
        found = values_not_held(spec, self.architecture, wanted, "GPT-2", "a Llama-shaped recipe (llama_*)")
        if spec.head_dim * spec.num_attention_heads != spec.hidden_size:
            found.append(
                Problem(
                    "kv_channels",
                    spec.kv_channels,
                    "GPT2LMHeadModel's heads are hidden_size / heads wide.",
                    "leave kv_channels unset (hidden_size / num_attention_heads).",
                )
            )
        return found

    def config(self, spec: Any, vocab: int, eod: Optional[int]) -> dict[str, Any]:
        return {
            "architectures": [self.architecture],
            "model_type": self.model_type,
            "vocab_size": vocab,
            "n_positions": spec.seq_length,
            "n_embd": spec.hidden_size,
            "n_layer": spec.num_layers,
            "n_head": spec.num_attention_heads,
            "n_inner": spec.ffn_hidden_size,
            "activation_function": "gelu_new",
            "layer_norm_epsilon": spec.norm_epsilon,
            "resid_pdrop": spec.hidden_dropout,
            "embd_pdrop": spec.hidden_dropout,
            "attn_pdrop": spec.attention_dropout,
            "tie_word_embeddings": True,
            # No end-of-document token without a tokenizer: GPT2Config's default (50256) would name none here.
            "bos_token_id": eod,
            "eos_token_id": eod,
        }

    def layer_to_hf(self, arch: Architecture, index: int, t: dict[str, Any]) -> dict[str, Any]:
        p = f"transformer.h.{index}."
        return {
            p + "ln_1.weight": t["input_norm.weight"],
            p + "ln_1.bias": t["input_norm.bias"],
            p + "attn.c_attn.weight": arch.concat_rows(*arch.split_qkv(t["qkv.weight"])).t(),
            p + "attn.c_attn.bias": arch.concat_rows(*arch.split_qkv(t["qkv.bias"])),
            p + "attn.c_proj.weight": t["proj.weight"].t(),
            p + "attn.c_proj.bias": t["proj.bias"],
            p + "ln_2.weight": t["pre_mlp_norm.weight"],
            p + "ln_2.bias": t["pre_mlp_norm.bias"],
            p + "mlp.c_fc.weight": t["fc1.weight"].t(),
            p + "mlp.c_fc.bias": t["fc1.bias"],
            p + "mlp.c_proj.weight": t["fc2.weight"].t(),
            p + "mlp.c_proj.bias": t["fc2.bias"],
        }

    def layer_from_hf(self, arch: Architecture, index: int, hf: dict[str, Any]) -> dict[str, Any]:
        p = f"transformer.h.{index}."
        widths = [arch.query_width, arch.kv_width, arch.kv_width]
        return {
            "input_norm.weight": hf[p + "ln_1.weight"],
            "input_norm.bias": hf[p + "ln_1.bias"],
            "qkv.weight": arch.merge_qkv(*hf[p + "attn.c_attn.weight"].t().split(widths)),
            "qkv.bias": arch.merge_qkv(*hf[p + "attn.c_attn.bias"].split(widths)),
            "proj.weight": hf[p + "attn.c_proj.weight"].t(),
            "proj.bias": hf[p + "attn.c_proj.bias"],
            "pre_mlp_norm.weight": hf[p + "ln_2.weight"],
            "pre_mlp_norm.bias": hf[p + "ln_2.bias"],
            "fc1.weight": hf[p + "mlp.c_fc.weight"].t(),
            "fc1.bias": hf[p + "mlp.c_fc.bias"],
            "fc2.weight": hf[p + "mlp.c_proj.weight"].t(),
            "fc2.bias": hf[p + "mlp.c_proj.bias"],
        }

    def layer_keys(self, index: int) -> list[str]:
        p = f"transformer.h.{index}."
        return [p + k for n in ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj")
                for k in (f"{n}.weight", f"{n}.bias")]  # fmt: skip

    #: Megatron role -> GPT-2 key of the tensors outside the layers (the output layer is the tied embeddings).
    GLOBALS = {
        "embedding.weight": "transformer.wte.weight",
        "position.weight": "transformer.wpe.weight",
        "final_norm.weight": "transformer.ln_f.weight",
        "final_norm.bias": "transformer.ln_f.bias",
    }


HF = GPT2Mapping()


FAMILY = Family(
    prefix="gpt",
    display_name="GPT",
    summary="GPT-3 architecture: learned positions, LayerNorm, GELU MLP, biases, tied embeddings",
    hf=HF,
)
