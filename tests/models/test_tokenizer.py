"""The tokenizer rebuilt from GGUF metadata."""

from __future__ import annotations

import pytest

TEXTS = [
    "Hello world!",
    "digits 1234567890 and 3.14159, -42",
    "café naïve résumé Ærøskøbing",
    "emoji 😀👍🏽 family 👨‍👩‍👧 flags 🇫🇷",
    "日本語のテキスト、中文文本、한국어",
    "def f(x):\n\treturn {'a': [1, 2, 3]}  # comment\n",
    '{"name": "Ada", "tags": ["x", "y"], "n": null}',
    "   leading and trailing spaces   \n\n\n",
    "<|im_start|>user\nhi<|im_end|>",
]


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_digits_are_split_one_by_one(tokenizer):
    ids = tokenizer.encode("12345")
    assert len(ids) == 5
    assert [tokenizer.decode([i]) for i in ids] == list("12345")


def test_special_tokens_are_single_ids(tokenizer):
    assert tokenizer.encode("<|im_start|>") == [1]
    assert tokenizer.encode("<|im_end|>") == [2]
    assert tokenizer.encode("<|endoftext|>") == [0]
    assert tokenizer.eos_token_ids == frozenset({0, 2})


def test_common_words_are_single_tokens(tokenizer):
    # Byte-level BPE with GPT-2 pre-tokenization keeps the leading space in the word.
    assert len(tokenizer.encode(" the")) == 1
    assert len(tokenizer.encode("Hello")) == 1
    assert tokenizer.decode(tokenizer.encode(" world")) == " world"


def test_chat_template_from_metadata(tokenizer):
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+2?"}])
    assert prompt == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    with_system = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert with_system.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    assert "SmolLM" not in with_system


def test_encode_chat_has_no_bos_for_smollm(tokenizer):
    ids = tokenizer.encode_chat([{"role": "user", "content": "Hi"}])
    assert ids[0] == 1  # <|im_start|>, from the template; the GGUF says add_bos_token = false
    messages = [{"role": "user", "content": "Hi"}]
    assert tokenizer.decode(ids) == tokenizer.apply_chat_template(messages)


def test_another_chat_template_shares_the_vocabulary_parts_and_leaves_the_original(tokenizer):
    from afm_struct.grammar.engines.llguidance_engine import ll_tokenizer_for

    before = tokenizer.hf.chat_template
    other = tokenizer.with_chat_template("{% for m in messages %}[{{ m.content }}]{% endfor %}")
    assert tokenizer.hf.chat_template == before
    other.hf.chat_template += "!"  # a test's own edits stay on the copy
    assert tokenizer.hf.chat_template == before
    assert other.decode(other.encode_chat([{"role": "user", "content": "hi"}])) == "[hi]!"
    assert ll_tokenizer_for(other) is ll_tokenizer_for(tokenizer)  # built once, for both


def test_a_split_special_tokens_call_left_on_the_tokenizer_does_not_reach_prompts(tokenizer):
    chat = [{"role": "user", "content": "hi"}]
    want = tokenizer.encode_chat(chat)
    tokenizer.hf.encode("<|im_start|>", add_special_tokens=False, split_special_tokens=True)
    assert tokenizer.hf.backend_tokenizer.encode_special_tokens  # what transformers leaves behind
    assert tokenizer.encode_chat(chat) == want
