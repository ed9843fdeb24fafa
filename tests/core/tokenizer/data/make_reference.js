// Writes DIR/reference.json: the ids and decoded text that Hugging Face tokenizers (its Node
// bindings, npm "tokenizers" 0.23.2) gives for every text in TEXTS.json with DIR/tokenizer.json.
// Not part of the build: run by hand when a tokenizer.json here changes.
//   npm install tokenizers@0.23.2 && node make_reference.js DIR TEXTS.json
const { Tokenizer } = require('tokenizers');
const fs = require('fs');
const path = require('path');

(async () => {
  const dir = process.argv[2];
  const texts = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
  const tokenizer = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  const out = [];
  for (const text of texts) {
    const encoding = await tokenizer.encode(text, null, { addSpecialTokens: false });
    const ids = Array.from(encoding.getIds());
    out.push({ text, ids, decoded: await tokenizer.decode(ids, false) });
  }
  fs.writeFileSync(path.join(dir, 'reference.json'), JSON.stringify(out, null, 1) + '\n');
})();
