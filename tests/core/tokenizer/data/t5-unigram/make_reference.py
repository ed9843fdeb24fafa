# Writes tokenizer.json, tokenizer_config.json and expected.json beside spiece.model (README.md in
# the folder above says how spiece.model was made): OUT=/tmp/x python3 make_reference.py, then copy
# $OUT/t5-unigram/* here. Needs transformers 5.17 and the sentencepiece Python module.
import json, os, shutil, sys
import sentencepiece, transformers

here = os.path.dirname(os.path.abspath(__file__))
out = os.path.join(os.environ["OUT"], "t5-unigram")
os.makedirs(out, exist_ok=True)
shutil.copy(os.path.join(here, "spiece.model"), os.path.join(out, "spiece.model"))
json.dump({"extra_ids": 10, "tokenizer_class": "T5Tokenizer"}, open(os.path.join(out, "tokenizer_config.json"), "w"))
tok = transformers.AutoTokenizer.from_pretrained(out)
sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(out, "spiece.model"))
texts = ["Hello world.", "First Citizen:\nBefore we proceed any further, hear me speak.",
         "  leading and   multiple   spaces  ",
         "Ｆｕｌｌ－ｗｉｄｔｈ ＡＢＣ １２３ and ligature ﬁne", "café naïve résumé", "emoji 🙂 and 中文 unknown",
         "<extra_id_0> masked <extra_id_3> span", "tab\there", "", "What is the total of 12 + 34?",
         "ALL CAPS SHOUTING, thou villain!", "a", "Ａ　full-width　space and trailing space ",
         "x\u0301 combining acute, ½ fraction, ™ sign"]
cases = []
for t in texts:
    plain = tok(t, add_special_tokens=False)["input_ids"]
    if "extra_id" not in t and plain != sp.encode(t):
        sys.exit(f"transformers and sentencepiece disagree on {t!r}")
    ids = tok(t)["input_ids"]
    cases.append({"text": t, "ids": ids, "ids_no_special": plain, "tokens": tok.convert_ids_to_tokens(ids),
                  "decoded": tok.decode(ids, skip_special_tokens=True), "sentencepiece_ids": sp.encode(t)})
tok.save_pretrained(out)
json.dump({"transformers": transformers.__version__, "cases": cases},
          open(os.path.join(out, "expected.json"), "w"), indent=1, ensure_ascii=False)
