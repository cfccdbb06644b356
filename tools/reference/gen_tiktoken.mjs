// gen_tiktoken.mjs writes tokenizer/testdata/gpt2/tiktoken.json, the GPT-2 ids that
// tokenizer/tokenizer_test.go compares against, from OpenAI's tiktoken (the npm package `tiktoken`,
// its Rust code built to WebAssembly, pinned in package.json): get_encoding("gpt2").encode_ordinary.
//
// Run from the repository root:
//
//   (cd tools/reference && npm ci --ignore-scripts)
//   node tools/reference/gen_tiktoken.mjs            # rewrite the file
//   node tools/reference/gen_tiktoken.mjs --check    # compare with the committed file
//
// The texts:
//   - every ASCII character (0x00..0x7F) alone and in five contexts: between letters, after a
//     space and doubled, between contractions, between digits, between newlines;
//   - DEL (0x7F) beside spaces, punctuation, contractions, letters of other scripts, in runs and
//     in texts longer than Encode's cached segments (tiktoken-go v0.10.0 dropped every DEL);
//   - 400 seeded random texts glued from a pool of whitespace (Unicode's too), contractions in
//     both cases, digits and number forms, several scripts, combining marks, emoji sequences,
//     control and format characters, private use, unassigned and plane-16 code points;
//   - letters that Unicode added after 15.0, flagged "newer_unicode": Go's unicode tables are
//     15.0, so gpt2go pre-tokenizes them as unassigned characters, unlike tiktoken (the Go test
//     compares them only where Go knows the letter).

import { get_encoding } from 'tiktoken';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const out = path.join(root, 'tokenizer', 'testdata', 'gpt2', 'tiktoken.json');
const check = process.argv.includes('--check');

const cases = [];
const add = (name, text, extra = {}) => cases.push({ name, text, ...extra });

// ASCII
const hex = (c) => c.toString(16).padStart(2, '0');
for (let c = 0; c < 128; c++) {
  const ch = String.fromCharCode(c);
  add(`ascii_${hex(c)}`, ch);
  add(`ascii_${hex(c)}_letters`, `a${ch}b`);
  add(`ascii_${hex(c)}_spaced`, ` ${ch} ${ch}${ch}x`);
  add(`ascii_${hex(c)}_contractions`, `'t${ch}'s`);
  add(`ascii_${hex(c)}_digits`, `1${ch}2`);
  add(`ascii_${hex(c)}_newlines`, `\n${ch}\n`);
}

// DEL
const del = '\u007f';
const delTexts = [
  `${del}${del}${del}`, ` ${del}`, `${del} `, `a ${del}`, ` ${del}b`, `${del} ${del}`, `  ${del}`, `!${del}!`, ` ${del}!?`,
  `x${del}\n${del}y`, `${del}1`, `${del}'s`, `it's${del}`, `é${del}ñ`, `日本${del}語`, `😀${del}`, `${del}<|endoftext|>`,
  `${del}\u0000${del}\u0001`, `\t${del}\t`, `\u00a0${del}\u3000`, `${del}\ufffd`, `e\u0301${del}\u0301`,
  `The quick brown fox${del} jumps over the lazy dog${del}. It's 12:30${del}!`,
  `${del.repeat(40)}`, `a${del.repeat(40)}b`, `${'!'.repeat(50)}${del}${'?'.repeat(50)}`,
  `ROMEO:\n${del}But soft! what light through yonder window${del}breaks?\n`,
];
delTexts.forEach((t, i) => add(`del_${String(i).padStart(2, '0')}`, t));

// Seeded random texts (xorshift32, as gen_wordpiece.mjs).
const pool = [
  ' ', '  ', '   ', '\n', '\n\n', '\r\n', '\r', '\t', '\t\t', ' \t', '\u000b', '\u000c', '\u0085', '\u00a0', '\u2003', '\u3000',
  '\u2028', '\u2029', '\u1680', '\u202f', '\u200b', '\ufeff', '\u180e',
  'a', 'A', 'hello', 'Hello', 'WORLD', "'s", "'S", "'t", "'T", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'D", "'", "''",
  '’s', "don't", "DON'T", "I'M",
  '1', '12', '123', '3.14', '½', '²', '٣', 'Ⅻ', '①', 'é', 'e\u0301', '\u0301', '\u0300\u0301', 'ñ', '日本語', '한국어', 'ไทย',
  'देवनागरी', '\u0915\u094d\u0937', 'עברית', 'العربية',
  '😀', '👍🏽', '👩\u200d👩\u200d👧', '🇯🇵', '❤️', '\u{1F600}\u{1F600}', '!', '!!', '...', '—', '«', '$', '<|endoftext|>', '<|', '|>',
  '\u0000', '\u0001', del, ` ${del}`, `${del} `, '\u{10FFFF}', '\u{E0001}', '\u{1D400}', 'ǅ', 'ß', 'İ', 'ﬁ', '\u{0378}', '\u{E000}',
  '\u{2F800}', '\u{323AF}', '\u{30000}', '\u{31350}', '\u{1E030}', '\u{11F00}', '\u{1B132}', '\u{1E4D0}', '\u{1F7D9}',
];
let state = 0x2545f491;
const next = () => {
  state ^= state << 13; state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5; state >>>= 0;
  return state;
};
for (let i = 0; i < 400; i++) {
  const k = 1 + (next() % 8);
  let text = '';
  for (let j = 0; j < k; j++) text += pool[next() % pool.length];
  add(`random_${String(i).padStart(3, '0')}`, text);
}

// Letters newer than Unicode 15.0: CJK Extension I (15.1), Egyptian hieroglyphs extended-A and
// Garay (16.0), and U+1C89, a Cyrillic capital letter added in 16.0.
for (const cp of [0x2ebf0, 0x2ee5d, 0x13460, 0x10d50, 0x1c89]) {
  const ch = String.fromCodePoint(cp);
  add(`newer_unicode_${cp.toString(16)}`, `x${ch}'s ${ch}${ch}1  ${ch}`, { newer_unicode: true });
}

const enc = get_encoding('gpt2');
for (const c of cases) c.ids = Array.from(enc.encode_ordinary(c.text));
enc.free();

const pkg = JSON.parse(fs.readFileSync(path.join(root, 'tools', 'reference', 'node_modules', 'tiktoken', 'package.json'), 'utf8'));
const header = {
  generator: 'tools/reference/gen_tiktoken.mjs',
  reference: `tiktoken ${pkg.version} (npm) get_encoding("gpt2").encode_ordinary`,
};
// One case per line: small, and a regenerated file diffs case by case. Characters that don't
// show (controls, DEL, spaces but ' ', format, private use, unassigned) are written as \u escapes.
const visible = (s) => JSON.stringify(s).replace(/[^\p{L}\p{M}\p{N}\p{P}\p{S} ]/gu, (ch) =>
  [...ch].length === 1 && ch.length === 2
    ? `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}\\u${ch.charCodeAt(1).toString(16).padStart(4, '0')}`
    : `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`);
const line = (c) => '  {' + Object.entries(c).map(([k, v]) => `${JSON.stringify(k)}:${k === 'text' ? visible(v) : JSON.stringify(v)}`).join(',') + '}';
const text = '{\n' + Object.entries(header).map(([k, v]) => ` ${JSON.stringify(k)}: ${JSON.stringify(v)},\n`).join('') +
  ' "cases": [\n' + cases.map(line).join(',\n') + '\n ]\n}\n';

if (check) {
  const old = fs.existsSync(out) ? fs.readFileSync(out, 'utf8') : null;
  console.log(`${path.relative(root, out)}: ${old === text ? 'identical' : 'DIFFERS'}`);
  if (old !== text) process.exit(1);
} else {
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, text);
  console.log(`wrote ${path.relative(root, out)} (${cases.length} cases, ${text.length} bytes)`);
}
