"""The DeepSeek-V3 family: multi-latent attention (`families.latent_attention`: queries compressed to rank 1536, keys
and values to a shared rank 512 plus one 64-channel rotary key, 128 heads of 128 + 64 query/key and 128 value
channels), its first 3 layers with a dense SwiGLU MLP, the other 58 with 256 fine-grained routed experts plus 1
shared expert, top-8 of sigmoid scores with group-limited routing (8 groups, 4 of them a token) and a bias that
balances the load beside a small sequence-level auxiliary loss, routed weights scaled by 2.5, a 129,280-token
vocabulary, RMSNorm, no biases, an untied output layer, and one multi-token prediction layer; its 671B row on the
layout of NeMo 2.7.3's own deepseek_v3 pretraining recipe, the sources of every value.

The row is named `deepseek_v3_671b` so that NeMo's own `deepseek_v3` factory stays reachable beside it in
`nemo llm pretrain --factory`. Its NeMo config class extends NeMo's `DeepSeekV3Config` (`nemo_config`), whose values
the recipe fields do not set (YaRN's scaling, the router's FP32 dtype, the shared expert's overlap) stay NeMo's.
Hugging Face conversion (DeepseekV3ForCausalLM) is not declared: `hf export` refuses the family by name. Multi-latent
attention does not build on this stack without Transformer Engine, so the CPU smoke run refuses it
(`smoke_training.cpu_compat`). Standard library only (the catalog and the planner read it on the fast path).
"""

from __future__ import annotations

from typing import Any

from nemo_recipes.families.blocks import Block, DenseMLP, LayerGroup, MoE
from nemo_recipes.families.family import Family
from nemo_recipes.families.latent_attention import MultiLatentAttention

REPORT = "DeepSeek-V3 Technical Report (arXiv:2412.19437)"
NEMO_CONFIG = "NeMo 2.7.3's DeepSeekV3Config (llm/gpt/model/deepseek.py, over DeepSeekConfig)"
HF_CONFIG = "the config.json of deepseek-ai/DeepSeek-V3"
SHAPE = (
    f"{REPORT}, Sec. 4.2 ('61 Transformer layers and the hidden dimension to 7168'); {NEMO_CONFIG}: 61 x 7168, "
    "128 heads, dense FFN 18432, experts' FFN 2048"
)
MLA = (
    f"{REPORT}, Sec. 4.2 (n_h = 128, d_h = 128, d_c = 512, d'_c = 1536, d^R_h = 64); {NEMO_CONFIG} (q_lora_rank "
    "1536, kv_lora_rank 512, qk_head_dim 128, qk_pos_emb_head_dim 64, v_head_dim 128)"
)
MOE = (
    f"{REPORT}, Sec. 4.2 ('1 shared expert and 256 routed experts ... 8 experts will be activated for each token, "
    f"and each token will be ensured to be sent to at most 4 nodes'); {NEMO_CONFIG}"
)
NEMO_RECIPE = (
    "NeMo 2.7.3's deepseek_v3 pretrain_recipe and its trainer (llm/recipes/deepseek_v3.py, deepseek.py): TP2 PP16 "
    "EP64 ETP1 CP1 with SP, no VP, 3 layers on the first stage and 2 on the last, on 128 nodes of 8; micro batch 1, "
    "global batch 4096, sequence 4096"
)
#: Tokens per step of NeMo's deepseek_v3 recipe (global batch 4096 x sequence 4096).
NEMO_STEP_TOKENS = 4096 * 4096
NEMO_SCHEDULE = (
    "NeMo 2.7.3's deepseek_v3 recipe: distributed_fused_adam_with_cosine_annealing's 2000 warmup steps, its "
    "trainer's 1,168,251 steps of 4096 x 4096 tokens (cosine over all of them)"
)

LAYOUT_FIELDS = ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel",
                 "expert_tensor_parallel", "pipeline_first_stage_layers", "pipeline_last_stage_layers",
                 "micro_batch_size", "global_batch_size", "num_nodes", "seq_length")  # fmt: skip

#: Where the row's values come from, where they differ from the catalog's `SOURCES`.
SOURCES: dict[str, str] = {
    **dict.fromkeys(
        ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "moe_ffn_hidden_size"), SHAPE
    ),  # fmt: skip
    **dict.fromkeys(("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"), MLA),
    **dict.fromkeys(LAYOUT_FIELDS, NEMO_RECIPE),
    **dict.fromkeys(("warmup_tokens", "decay_tokens", "train_tokens"), NEMO_SCHEDULE),
    "kv_channels": f"128: {NEMO_CONFIG} (what Megatron-Core's MLA reads are qk_head_dim and v_head_dim)",
    "vocab_size": f"129,280 rows: {HF_CONFIG} (vocab_size); {REPORT}, Sec. 4.1 (128K tokens)",
    "make_vocab_size_divisible_by": "505: 129,280 = 256 x 505 needs no padding at any TP up to 256, so the model "
    "has the 129,280 rows NeMo's DeepSeekV3Config counts (its own 1280 would pad to 130,560 at the recipe's TP 2)",
    "position_embedding_type": f"RoPE on the 64 decoupled rotary channels (YaRN-scaled: rope_type, "
    f"rotary_scaling_factor 40 and mscale stay {NEMO_CONFIG}'s)",
    "rotary_base": f"10,000: {NEMO_CONFIG}; rope_theta in {HF_CONFIG}",
    "normalization": f"RMSNorm: {NEMO_CONFIG}",
    "norm_epsilon": f"1e-6: {NEMO_CONFIG} (layernorm_epsilon); rms_norm_eps in {HF_CONFIG}",
    "qk_layernorm": f"on: the RMSNorms of the query and key/value latents ({REPORT}, Sec. 2.1.1); {NEMO_CONFIG}",
    "activation": f"SwiGLU (dense MLP and experts): {NEMO_CONFIG} (activation_func=silu, gated_linear_unit=True)",
    "add_bias_linear": f"no biases: {NEMO_CONFIG}",
    "share_embeddings": f"untied output layer: {NEMO_CONFIG}; tie_word_embeddings false in {HF_CONFIG}",
    "hidden_dropout": f"0: {NEMO_CONFIG}",
    "attention_dropout": f"0: {NEMO_CONFIG}",
    "num_moe_experts": f"256 routed experts: {MOE}",
    "moe_router_topk": f"8: {MOE}",
    "moe_shared_expert_intermediate_size": f"2048, one shared expert of the routed experts' width: {MOE}",
    "moe_first_dense_layers": f"3: {NEMO_CONFIG} (moe_layer_freq [0] x 3 + [1] x 58); first_k_dense_replace in "
    f"{HF_CONFIG}",
    "moe_router_score_function": f"sigmoid: {REPORT}, Sec. 2.1.2 (Eq. 15); {NEMO_CONFIG}",
    "moe_router_pre_softmax": f"on: {NEMO_CONFIG} (DeepSeekConfig; with sigmoid scores the top-k are normalised "
    "after the choice, Eq. 13)",
    "moe_router_enable_expert_bias": f"on: auxiliary-loss-free balancing by a per-expert bias ({REPORT}, Sec. "
    f"2.1.2); {NEMO_CONFIG}",
    "moe_router_bias_update_rate": f"1e-3: {NEMO_CONFIG} (the report's bias update speed gamma, 0.001 for the first "
    "14.3T tokens, Sec. 4.2)",
    "moe_router_load_balancing_type": f"seq_aux_loss: the complementary sequence-wise balance loss ({REPORT}, Sec. "
    f"2.1.2, Eq. 17-20); {NEMO_CONFIG} (DeepSeekConfig)",
    "moe_aux_loss_coeff": f"1e-4: {NEMO_CONFIG}; the report's alpha = 0.0001 ('an extremely small value', Sec. 4.2)",
    "moe_router_num_groups": f"8 groups of 32 experts (the report's nodes): {NEMO_CONFIG}; n_group in {HF_CONFIG}",
    "moe_router_group_topk": f"4 groups a token ('at most 4 nodes'): {MOE}; topk_group in {HF_CONFIG}",
    "moe_router_topk_scaling_factor": f"2.5: {NEMO_CONFIG}; routed_scaling_factor in {HF_CONFIG}",
    "moe_token_dispatcher_type": f"alltoall: {NEMO_CONFIG} (DeepSeekConfig)",
    "moe_grouped_gemm": f"on: {NEMO_CONFIG} (DeepSeekConfig)",
    "moe_permute_fusion": f"on: {NEMO_CONFIG} (DeepSeekConfig: on wherever Transformer Engine >= 2.1, as NeMo's "
    "GPU image)",
    "mtp_num_layers": f"1 multi-token prediction layer ({REPORT}, Sec. 2.2, D = 1): NeMo 2.7.3's deepseek_v3 "
    "pretrain_recipe, whose use_mtp is on by default (mtp_num_layers=1)",
    "mtp_loss_scaling_factor": "0.1: NeMo 2.7.3's deepseek_v3 pretrain_recipe (use_mtp); the report's lambda for its "
    "last 4.8T tokens (0.3 before, Sec. 4.2)",
    "max_lr": "3e-4, min LR 3e-5 (10 %): NeMo 2.7.3's deepseek_v3 pretrain_recipe "
    "(distributed_fused_adam_with_cosine_annealing(max_lr=3e-4)); the report's 2.2e-4 is its own schedule",
    "adam_eps": "1e-5: NeMo 2.7.3's distributed_fused_adam_with_cosine_annealing (llm/recipes/optim/adam.py)",
    "recompute": "selective: NeMo 2.7.3's deepseek_v3 recipe recomputes selectively, but its modules (mla_up_proj, "
    "layernorm) where the catalog's selective is Megatron-Core's default (core_attn)",
}

#: The row, as `RecipeSpec` values (`catalog.RECIPES` builds it).
ROWS: dict[str, dict[str, Any]] = {
    "deepseek_v3_671b": dict(
        size_label="671B",
        num_layers=61,
        hidden_size=7168,
        num_attention_heads=128,
        ffn_hidden_size=18432,
        seq_length=4096,
        kv_channels=128,
        vocab_size=129_280,
        make_vocab_size_divisible_by=505,
        position_embedding_type="rope",
        rotary_base=10_000,
        normalization="RMSNorm",
        norm_epsilon=1e-6,
        qk_layernorm=True,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_head_dim=128,
        qk_pos_emb_head_dim=64,
        v_head_dim=128,
        mtp_num_layers=1,
        mtp_loss_scaling_factor=0.1,
        activation="swiglu",
        add_bias_linear=False,
        share_embeddings=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        num_moe_experts=256,
        moe_router_topk=8,
        moe_ffn_hidden_size=2048,
        moe_shared_expert_intermediate_size=2048,
        moe_router_score_function="sigmoid",
        moe_router_pre_softmax=True,
        moe_router_load_balancing_type="seq_aux_loss",
        moe_aux_loss_coeff=1e-4,
        moe_router_enable_expert_bias=True,
        moe_token_dispatcher_type="alltoall",
        moe_grouped_gemm=True,
        moe_permute_fusion=True,
        moe_router_num_groups=8,
        moe_router_group_topk=4,
        moe_router_topk_scaling_factor=2.5,
        moe_router_bias_update_rate=1e-3,
        moe_first_dense_layers=3,
        tensor_parallel=2,
        pipeline_parallel=16,
        context_parallel=1,
        pipeline_first_stage_layers=3,
        pipeline_last_stage_layers=2,
        expert_parallel=64,
        expert_tensor_parallel=1,
        micro_batch_size=1,
        global_batch_size=4096,
        recompute="selective",
        max_lr=3e-4,
        adam_eps=1e-5,
        warmup_tokens=2000 * NEMO_STEP_TOKENS,
        decay_tokens=1_168_251 * NEMO_STEP_TOKENS,
        train_tokens=1_168_251 * NEMO_STEP_TOKENS,
        num_nodes=128,
    ),
}


def layers(spec: Any) -> tuple[LayerGroup, ...]:
    """Multi-latent attention in every layer; a dense MLP in the first `moe_first_dense_layers`, experts after
    (Megatron-Core's moe_layer_freq); every layer dense where the spec has no experts."""
    attention = MultiLatentAttention.of(spec)
    dense: tuple[Block, ...] = (attention, DenseMLP.of(spec))
    if spec.num_moe_experts is None:
        return (LayerGroup(spec.num_layers, dense),)
    first = min(spec.moe_first_dense_layers, spec.num_layers)
    experts = LayerGroup(spec.num_layers - first, (attention, MoE.of(spec)))
    return (LayerGroup(first, dense), experts) if first else (experts,)


FAMILY = Family(
    name="deepseek",
    display_name="DeepSeekV3",
    summary="DeepSeek-V3: multi-latent attention, 256 routed + 1 shared SwiGLU experts after 3 dense layers, top-8 "
    "sigmoid router with group-limited routing and bias balancing, RMSNorm, no biases, untied output layer, "
    "multi-token prediction",
    rows=ROWS,
    sources=SOURCES,
    layers=layers,
    nemo_config="nemo.collections.llm.gpt.model.deepseek.DeepSeekV3Config",
)
