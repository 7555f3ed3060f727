#!/usr/bin/env python3
"""tokenizer_refs.py: the tokenizers and expected ids behind tests/test_tokenizer.c.

Run where the Python `tokenizers` package is (the H200 machine has it):

    python3 tools/tokenizer_refs.py tests/tokenizers

Three small tokenizers in Hugging Face's tokenizer.json format are trained on the repository's
docs with the reference library, one per family the lab reads:

  llama.json   sentencepiece-style BPE as Llama / Mistral ship it: normalizer Prepend("▁") +
               Replace(" ", "▁"), no pre-tokenizer, byte_fallback with <0x00>..<0xFF> in the
               vocabulary, fuse_unk, decoder Replace + ByteFallback + Fuse + Strip, template
               "<s> $A"
  gpt2.json    byte-level BPE as GPT-2: ByteLevel pre-tokenizer (the GPT-2 regex), ByteLevel
               decoder and post-processor, no template
  llama3.json  Split(regex, Isolated) + ByteLevel(use_regex=false) pre-tokenizers, ignore_merges,
               template "<|begin_of_text|> $A"

and a few hundred strings (Unicode, whitespace runs, digits, emoji, special-token text, ...) are
encoded by it with and without special tokens and decoded back. Written: the three tokenizer
files and expected.json {"strings": [...], "<name>": {"ids": [[...]], "ids_nospecial": [[...]],
"decoded": [...]}}. The files are committed; rerun only on purpose.
"""
import json
import os
import random
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import trainers

out = sys.argv[1] if len(sys.argv) > 1 else "tests/tokenizers"
os.makedirs(out, exist_ok=True)
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# the corpus: the repository's docs, line by line, plus a few lines of other scripts
lines = []
for d in ("docs", "docs/mixers"):
    for f in sorted(os.listdir(os.path.join(root, d))):
        if f.endswith(".md"):
            with open(os.path.join(root, d, f), encoding="utf-8") as fh:
                lines += [l.rstrip("\n") for l in fh if l.strip()]
lines += ["Grüße aus Köln, ça va très bien.", "日本語のテキストも少し。", "Привет, мир!",
          "emoji 😀 🚀 ✨ end", "tabs\tand\nnewlines", "numbers 12345 and 3.14159"] * 3


def strings():
    """The test strings: fixed cases, then random mixes (seeded)."""
    s = ["", " ", "  ", "\t", "\n", "hello", " hello", "hello ", "hello  world",
         "Hello World", "HELLO", "don't you're we've I'm they'll she'd it's",
         "12345", "3.14159", "1 2 3", "2024-12-02", "x=1;y=22;z=333",
         "<s>", "</s>", "<s> hello </s>", "a<s>b", "<unk>", "<|begin_of_text|>hi",
         "Grüße", "ça", "naïve café", "日本語", "こんにちは世界", "Привет", "مرحبا", "שלום",
         "😀", "🚀✨", "👨‍👩‍👧", "a😀b", "\u00a0nbsp", "zero\u200bwidth", "ﬁ ligature",
         "tab\there", "line1\nline2", "trailing\n", "\r\n", "   leading", "many     spaces",
         "punctuation!?.,;:", "(parens) [brackets] {braces}", "snake_case_name", "CamelCase",
         "https://example.com/path?q=1", "e-mail@example.org", "▁already▁meta",
         "mixscope steps tokens through any mixer", "The delta rule writes S <- S + beta k e^T."]
    r = random.Random(7)
    alphabet = ("abcdefghijklmnopqrstuvwxyz ABCXYZ 0123456789 .,!?'\"-_ \t\n"
                "éüñçøå日本語中文한국어ÄÖÜß😀🚀✨🙂 ▁<>/|")
    words = sorted(set(w for l in lines for w in l.split() if len(w) < 16))
    for i in range(260):
        if i % 2:
            n = r.randint(1, 40)
            s.append("".join(r.choice(alphabet) for _ in range(n)))
        else:
            k = r.randint(1, 8)
            sep = r.choice([" ", "  ", "\n", "\t", " "])
            s.append(sep.join(r.choice(words) for _ in range(k)))
    return s


def train_llama():
    base = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    base.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                            normalizers.Replace(" ", "▁")])
    tr = trainers.BpeTrainer(vocab_size=700, special_tokens=["<unk>", "<s>", "</s>"],
                             show_progress=False)
    base.train_from_iterator(lines, tr)
    j = json.loads(base.to_str())
    vocab = j["model"]["vocab"]
    # Llama's layout: <unk> <s> </s>, the 256 byte tokens, then the learnt pieces
    order = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    order += [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1]) if t not in order]
    j["model"]["vocab"] = {t: i for i, t in enumerate(order)}
    for a in j["added_tokens"]:
        a["id"] = j["model"]["vocab"][a["content"]]
    tok = Tokenizer.from_str(json.dumps(j))
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A </s> <s> $B", special_tokens=[("<s>", 1), ("</s>", 2)])
    return tok


def train_gpt2():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tr = trainers.BpeTrainer(vocab_size=700, special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tok.train_from_iterator(lines, tr)
    return tok


def train_llama3():
    pat = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
           r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    try:
        tok = Tokenizer(models.BPE(ignore_merges=True))
    except TypeError:  # an older tokenizers: the merges decide every word
        tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=800, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tok.train_from_iterator(lines, tr)
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])
    return tok


import tokenizers
S = strings()
exp = {"strings": S, "tokenizers_version": tokenizers.__version__}
for name, make in (("llama", train_llama), ("gpt2", train_gpt2), ("llama3", train_llama3)):
    tok = make()
    tok.save(os.path.join(out, name + ".json"))
    tok = Tokenizer.from_file(os.path.join(out, name + ".json"))  # as the lab reads it
    e = {"ids": [], "ids_nospecial": [], "decoded": []}
    for s in S:
        ids = tok.encode(s).ids
        e["ids"].append(ids)
        e["ids_nospecial"].append(tok.encode(s, add_special_tokens=False).ids)
        e["decoded"].append(tok.decode(ids, skip_special_tokens=False))
    exp[name] = e
    print(name, "vocab", tok.get_vocab_size(), "strings", len(S))
with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as fh:
    json.dump(exp, fh, ensure_ascii=False)
print("wrote", out, "tokenizers", tokenizers.__version__)
