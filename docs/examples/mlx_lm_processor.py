"""Runnable example: constrain unmodified ``mlx_lm.generate`` with afm-struct's processor.

    .venv/bin/python docs/examples/mlx_lm_processor.py
"""

import json

import afm_struct  # before mlx: on Linux it loads the fast BLAS, which must precede MLX

# isort: split
from mlx_lm import generate
from mlx_lm.tokenizer_utils import TokenizerWrapper

loaded = afm_struct.load_model()  # or any mlx-lm model dir / GGUF path
schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
          "required": ["city", "country"], "additionalProperties": False}
constraint = afm_struct.compile_constraint(loaded.tokenizer, afm_struct.JsonSchemaRequest(schema))
processor = afm_struct.make_mlx_lm_processor(constraint, loaded.tokenizer)  # one per generation

tokenizer = TokenizerWrapper(loaded.tokenizer.hf, eos_token_ids=set(loaded.tokenizer.eos_token_ids))
prompt = loaded.tokenizer.apply_chat_template([{"role": "user", "content": "Where is the Eiffel Tower?"}])
text = generate(loaded.model, tokenizer, prompt, max_tokens=60, logits_processors=[processor])
print(json.loads(text))
