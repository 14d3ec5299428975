"""Your own text as Megatron training data: `prepare` tokenizes inputs into indexed datasets (`.bin`/`.idx`) with a
manifest beside each, `tokenizers` finds, loads or trains a local tokenizer, `manifest` reads what a dataset says
about itself.

Nothing is imported here: `manifest` and `tokenizers` are light (standard library at import), `prepare` imports
Megatron-Core and NumPy inside its functions.
"""
