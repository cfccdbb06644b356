// gen_wordpiece.mjs writes the WordPiece fixture that tokenizer/wordpiece_test.go compares
// against, using Hugging Face's JavaScript tokenizer (@huggingface/transformers, pinned in
// package.json) as the reference:
//
//   tokenizer/testdata/wordpiece/vocab.txt   a BERT-style vocab built here (no download)
//   tokenizer/testdata/wordpiece/cases.json  texts -> HF's tokens, ids and decoded text, for
//                                            the uncased (lower-case + strip accents) and the
//                                            cased normalizer; id lists -> HF's decode
//
// Run from the repository root:
//
//   (cd tools/reference && npm ci --ignore-scripts)
//   node tools/reference/gen_wordpiece.mjs            # rewrite the two files
//   node tools/reference/gen_wordpiece.mjs --check    # compare with the committed files
//
// The vocab is bert-base's layout ([PAD] 0, [unused0..98], [UNK] 100, [CLS] 101, [SEP] 102,
// [MASK] 103) followed by single characters (ASCII, accented Latin, Greek, CJK, Hangul and its
// jamo, a few symbols and emoji), each also as a "##" continuation, then the most frequent
// words of Tiny Shakespeare (both cases), frequent word starts and "##" word pieces, so
// that real text splits into several pieces and some words stay unknown. It needs Tiny
// Shakespeare: $GPT2GO_SHAKESPEARE or ../shared/data/tinyshakespeare.txt.
//
// The tokenizer is configured exactly like bert-base-uncased's tokenizer.json (BertNormalizer
// with clean_text and handle_chinese_chars, BertPreTokenizer, WordPiece with "##" and 100
// characters per word, the five specials as non-normalized special added tokens, the WordPiece
// decoder with cleanup), only with this vocab and lowercase true or false.
//
// One deviation of the JavaScript port from Hugging Face's Rust tokenizers (and from BERT's
// Python code) is corrected here before generating: its BertNormalizer walks UTF-16 code units
// when it puts spaces around CJK ideographs, so ideographs outside the Basic Multilingual Plane
// (CJK Extension B and later, U+20000..) are never separated. Rust and Python look at code
// points. The script replaces that one method with a code-point version and records in
// cases.json which cases the unpatched port would give differently ("js_port_differs").

import { BertTokenizer } from '@huggingface/transformers';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const outDir = path.join(root, 'tokenizer', 'testdata', 'wordpiece');
const check = process.argv.includes('--check');

const SPECIALS = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'];

// ---- vocab ----

function shakespeare() {
  const p = process.env.GPT2GO_SHAKESPEARE || path.join(root, '..', 'shared', 'data', 'tinyshakespeare.txt');
  if (!fs.existsSync(p)) {
    throw new Error(`Tiny Shakespeare not found at ${p}; set GPT2GO_SHAKESPEARE`);
  }
  return fs.readFileSync(p, 'utf8');
}

// top returns the n keys of counts with the highest counts, ties broken by code-unit order.
function top(counts, n) {
  return [...counts.entries()]
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    .slice(0, n)
    .map(([k]) => k);
}

function buildVocab() {
  const vocab = ['[PAD]'];
  for (let i = 0; i < 99; i++) vocab.push(`[unused${i}]`);
  vocab.push('[UNK]', '[CLS]', '[SEP]', '[MASK]');
  const seen = new Set(vocab);
  const add = (t) => {
    if (!seen.has(t)) {
      seen.add(t);
      vocab.push(t);
    }
  };
  // Single characters, then their continuations.
  const chars = [];
  for (let c = 0x21; c <= 0x7e; c++) chars.push(String.fromCharCode(c));
  chars.push(...'àáâäåæçèéêëìíîïñòóôöøùúûüýÿßÀÁÂÄÅÆÇÈÉÊËÌÍÎÏÑÒÓÔÖØÙÚÛÜ');
  chars.push(...'αβγδεζηθικλμνξοπρσςτυφχψωΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩόέ');
  chars.push(...'日本語中文字符测试東京大学人の');
  chars.push(...'テキストカタ한국어한국어');
  chars.push(...'¿¡«»—–…。、「」€£©°·'); // '·' is punctuation, '€' '£' '©' '°' are not
  chars.push('𠀀', '😀', '❤', '👍', '🇯', '🇵', 'ı', 'ﬁ', 'Ｆ', 'ｕ', 'ｌ');
  for (const c of chars) add(c);
  for (const c of chars) add('##' + c);

  const text = shakespeare();
  const words = text.match(/[A-Za-z]+/g);
  const lower = new Map();
  const cased = new Map();
  for (const w of words) {
    lower.set(w.toLowerCase(), (lower.get(w.toLowerCase()) ?? 0) + 1);
    cased.set(w, (cased.get(w) ?? 0) + 1);
  }
  const topLower = top(lower, 1200);
  for (const w of topLower) add(w);
  for (const w of top(cased, 600)) add(w);

  // Pieces for the rarer words: their starts (3..5 letters) and "##" pieces (2..4 letters).
  const known = new Set(topLower);
  const starts = new Map();
  const pieces = new Map();
  for (const [w, n] of lower) {
    if (known.has(w) || w.length < 5) continue;
    for (let k = 3; k <= 5 && k < w.length; k++) starts.set(w.slice(0, k), (starts.get(w.slice(0, k)) ?? 0) + n);
    for (let i = 1; i < w.length; i++) {
      for (let k = 2; k <= 4 && i + k <= w.length; k++) {
        const p = '##' + w.slice(i, i + k);
        pieces.set(p, (pieces.get(p) ?? 0) + n);
      }
    }
  }
  for (const s of top(starts, 400)) add(s);
  for (const p of top(pieces, 500)) add(p);
  // A few words for the fixture's own sentences.
  for (const w of ['hello', 'world', 'paris', 'france', 'cafe', 'resume', 'naive', 'go', 'strasse',
    'istanbul', 'σοφος', 'οσος', 'hashtag', 'user', 'mcdonald', 'Hello', 'World', 'Paris', 'France', 'Go',
    'Café', 'résumé', 'σοφός', 'don', 'it', 'we', 'they', 'i', 've', 're', 'm', '100', '1', '000', '50', '3', '14159', '2024', '##ing', '##ed', '##s']) {
    add(w);
  }
  return vocab;
}

// ---- the reference tokenizer ----

function makeTokenizer(vocab, lowercase, patched) {
  const ids = Object.fromEntries(vocab.map((t, i) => [t, i]));
  const json = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: SPECIALS.map((t) => ({
      id: ids[t], content: t, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
    })).sort((a, b) => a.id - b.id),
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: { type: 'BertProcessing', sep: ['[SEP]', ids['[SEP]']], cls: ['[CLS]', ids['[CLS]']] },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100, vocab: ids },
  };
  const config = {
    tokenizer_class: 'BertTokenizer', do_lower_case: lowercase, strip_accents: null, tokenize_chinese_chars: true,
    clean_up_tokenization_spaces: true, model_max_length: 512,
    unk_token: '[UNK]', sep_token: '[SEP]', pad_token: '[PAD]', cls_token: '[CLS]', mask_token: '[MASK]',
  };
  const tok = new BertTokenizer(json, config);
  if (patched) {
    // Code points, not UTF-16 units (see the file comment). The normalizer is an own instance,
    // so this changes only this tokenizer.
    const normalizer = tok._tokenizer.normalizer;
    if (typeof normalizer.tokenize_chinese_chars !== 'function') {
      throw new Error('the BertNormalizer no longer has tokenize_chinese_chars: review the patch');
    }
    normalizer.tokenize_chinese_chars = (text) => {
      let out = '';
      for (const ch of text) {
        out += isChineseChar(ch.codePointAt(0)) ? ` ${ch} ` : ch;
      }
      return out;
    };
  }
  return tok;
}

// BERT's CJK ideograph blocks (the same ranges as the port's own is_chinese_char).
function isChineseChar(cp) {
  return (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0x3400 && cp <= 0x4dbf) || (cp >= 0x20000 && cp <= 0x2a6df) ||
    (cp >= 0x2a700 && cp <= 0x2b73f) || (cp >= 0x2b740 && cp <= 0x2b81f) || (cp >= 0x2b820 && cp <= 0x2ceaf) ||
    (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0x2f800 && cp <= 0x2fa1f);
}

// ---- the cases ----

const long100 = 'a'.repeat(100);
const texts = [
  // plain text
  ['shakespeare', 'ROMEO:\nBut soft! what light through yonder window breaks?\nIt is the east, and Juliet is the sun.'],
  ['hello', 'Hello, world!'],
  ['multi_piece', 'Thereupon the unfortunately unhallowed countrymen murmured.'],
  ['mixed_case', 'MiXeD CaSe WORDS and McDonald\'s'],
  ['digits', '1,000.50 and 3.14159 in 2024'],
  // punctuation: ASCII ranges (including symbols that are not Unicode P*) and Unicode P*
  ['ascii_punct', 'a.b,c;d:e!f?g $100 + 5% = ~[x]^{y}|`z` <tag> a_b-c/d\\e "q" #hashtag @user'],
  ['unicode_punct', '«quoted» — dash – en… ¿qué? ¡sí! 「括弧」。、 a·b'],
  ['symbols_not_punct', '5€ £3 ©2024 30°C'],
  ['contractions', "don't can't I'm we'll they've it's"],
  ['hashes', '##ing a##b ###'],
  ['ellipsis', 'x...y!!??'],
  // accents and case
  ['accents', 'Café résumé naïve Ångström Ünïcödé'],
  ['combining', 'cafe\u0301 re\u0301sume\u0301 n\u0303'],
  ['sharp_s_dotted_i', 'Straße İstanbul ıi'],
  ['greek_final_sigma', 'ΣΟΦΟΣ ΟΔΥΣΣΕΥΣ σοφός ΌΣΟΣ.Α ΣΑΣ. Σ'],
  ['compat_not_decomposed', 'ﬁne Ｆｕｌｌ Ⅻ'],
  ['singleton_decomposition', 'a;b\u037ec\u0387d'],
  // CJK and other scripts
  ['cjk', '日本語のテキスト 中文字符测试 東京大学'],
  ['cjk_glued', 'a中b文c'],
  ['hangul', '한국어 텍스트'],
  ['cjk_ext_b', '𠀀𠀁x𠀂'],
  ['cjk_compat', '\uf900\ufa0ex'],
  // emoji and friends (not punctuation: part of the word)
  ['emoji', 'I ❤️ Go 😀! a😀b 👍👍'],
  ['emoji_zwj', '👩‍👩‍👧 family'],
  ['flag', 'flag 🇯🇵'],
  // control and format characters
  ['nul', 'a\u0000b'],
  ['controls', 'x\u0007y\u001bz\u007fw'],
  ['format_chars', 'zero\u200bwidth soft\u00adhyphen bom\ufeffx joiner\u200dx'],
  ['replacement_char', '\ufffd a\ufffdb'],
  ['nel_vt_ff', 'a\u0085b\u000bc\u000cd'],
  ['private_use', 'priv\ue000use'],
  // whitespace
  ['whitespace_ascii', '\t\n\r tab\there\nnew\rline\r\nend  '],
  ['whitespace_unicode', 'a\u00a0b\u2003c\u3000d\u2028e\u2029f\u1680g\u202fh\u205fi'],
  ['leading_trailing', '   padded   '],
  ['only_spaces', '   \n\t '],
  ['empty', ''],
  // long and unknown words
  ['long_100', long100],
  ['long_101', long100 + 'a'],
  ['long_101_in_sentence', 'the ' + long100 + 'a the'],
  ['long_after_strip', 'e\u0301'.repeat(60)],
  ['long_supercal', 'supercalifragilisticexpialidocious'],
  ['unknown_words', 'xyzzy ŋ ⓐ helŋlo the'],
  ['unknown_piece', 'thezzz'],
  // special tokens in the text
  ['mask', '[MASK]'],
  ['mask_sentence', 'Paris is the [MASK] of France.'],
  ['cls_sep', '[CLS] hello [SEP] world [SEP]'],
  ['specials_glued', 'x[MASK]y[MASK][MASK]z'],
  ['unk_pad_texts', '[UNK] [PAD]'],
  ['lowercase_mask_is_text', '[mask] [Mask]'],
  ['broken_specials', '[ MASK ] [MASK [MA\u0000SK] [unused1]'],
  ['special_then_accent', '[MASK]\u0301a [SEP]é'],
  ['special_only_controls', '\u0000[SEP]\u0000'],
];

// Random texts from a pool of the characters above (and pieces of specials), the same each
// run (xorshift32, fixed seed): the Go test compares these like the named cases.
function randomTexts(n) {
  const pool = [
    ...'abcdeosthnrlmwyzABCDEOSTHNRLMWYZ', ...'0123456789', ' ', ' ', ' ', '\t', '\n', '\r', '\u00a0', '\u3000', '\u2028',
    ...'.,;:!?\'"-_()[]{}<>/\\@#$%^&*+=|~`', ...'«»—…¿¡·。、「」', ...'€£©°',
    ...'éèüöÅÑßçØ', '\u0301', '\u0308', '\u0303', 'e\u0301', ...'ΣσςΑΟΌ', ...'日本語中文東京', ...'テキスト', ...'한국', '𠀀', '𠀁',
    '😀', '❤', '\ufe0f', '👍', '\u200d', '\u200b', '\u00ad', '\ufeff', '\u0000', '\u0007', '\u007f', '\u0085', '\ue000', '\ufffd',
    'ﬁ', 'Ｆ', 'İ', 'ı', '\u037e', '\u0387',
    '[MASK]', '[SEP]', '[CLS]', '[PAD]', '[UNK]', '[MASK', 'MASK]', '[mask]', '##', 'the', 'thou', 'king', 'love', 'ing',
  ];
  let state = 0x9e3779b9;
  const next = () => {
    state ^= state << 13; state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5; state >>>= 0;
    return state;
  };
  const out = [];
  for (let i = 0; i < n; i++) {
    const len = 1 + (next() % 24);
    let text = '';
    for (let j = 0; j < len; j++) text += pool[next() % pool.length];
    out.push([`random_${String(i).padStart(3, '0')}`, text]);
  }
  return out;
}
texts.push(...randomTexts(300));

// Id lists for decode, written as tokens.
const decodes = [
  ['[CLS]', 'hello', '##s', '[SEP]'],
  ['##s', 'the'],
  ['don', "'", 't'],
  ['do', 'n', "'", 't', 'i', "'", 'll', 'x', '.', '.', '.'],
  ['it', "'", 's', 'i', "'", 'm', 'we', "'", 've', 'they', "'", 're'],
  ['a', '.', 'b', '?', 'c', '!', 'd', ',', 'e'],
  ['[MASK]', '[PAD]', '[PAD]'],
  ['[UNK]', '##s', '[unused0]'],
  ['日', '本', '##語'],
  ["'", 'x', "'"],
];

function run(tok, text) {
  const ids = tok.encode(text, { add_special_tokens: false });
  const out = { ids, tokens: ids.map((id) => tok._tokenizer.id_to_token(id)) };
  if (ids.length > 0) {
    out.decoded = tok.decode(ids);
    out.decoded_skip_special = tok.decode(ids, { skip_special_tokens: true });
  }
  return out;
}

function generate() {
  const vocab = buildVocab();
  const cases = [];
  const jsPortDiffers = [];
  const modes = { uncased: true, cased: false };
  const toks = {};
  for (const [mode, lowercase] of Object.entries(modes)) {
    toks[mode] = { fixed: makeTokenizer(vocab, lowercase, true), port: makeTokenizer(vocab, lowercase, false) };
  }
  for (const [name, text] of texts) {
    const c = { name, text };
    for (const mode of Object.keys(modes)) {
      c[mode] = run(toks[mode].fixed, text);
      const port = run(toks[mode].port, text);
      if (JSON.stringify(port.ids) !== JSON.stringify(c[mode].ids)) jsPortDiffers.push(`${name} (${mode})`);
    }
    cases.push(c);
  }
  const ids = Object.fromEntries(vocab.map((t, i) => [t, i]));
  const decodeCases = decodes.map((tokens) => {
    const list = tokens.map((t) => {
      if (!(t in ids)) throw new Error(`decode case token ${t} not in the vocab`);
      return ids[t];
    });
    const tok = toks.uncased.fixed;
    return { ids: list, decoded: tok.decode(list), decoded_skip_special: tok.decode(list, { skip_special_tokens: true }) };
  });
  const pkg = JSON.parse(fs.readFileSync(path.join(root, 'tools', 'reference', 'node_modules', '@huggingface', 'transformers', 'package.json'), 'utf8'));
  const fixture = {
    generator: 'tools/reference/gen_wordpiece.mjs',
    reference: `@huggingface/transformers ${pkg.version} BertTokenizer (tokenize_chinese_chars patched to code points)`,
    vocab_size: vocab.length,
    js_port_differs: jsPortDiffers,
    cases,
    decode_cases: decodeCases,
  };
  // One case per line: small, and a regenerated file diffs case by case.
  const lines = Object.entries(fixture).map(([k, v]) =>
    Array.isArray(v) && v.length > 0 && typeof v[0] === 'object'
      ? ` ${JSON.stringify(k)}: [\n${v.map((x) => '  ' + JSON.stringify(x)).join(',\n')}\n ]`
      : ` ${JSON.stringify(k)}: ${JSON.stringify(v)}`);
  return { vocabText: vocab.join('\n') + '\n', casesText: `{\n${lines.join(',\n')}\n}\n` };
}

const { vocabText, casesText } = generate();
const files = { 'vocab.txt': vocabText, 'cases.json': casesText };
let same = true;
for (const [name, content] of Object.entries(files)) {
  const p = path.join(outDir, name);
  if (check) {
    const old = fs.existsSync(p) ? fs.readFileSync(p, 'utf8') : null;
    const ok = old === content;
    same &&= ok;
    console.log(`${path.relative(root, p)}: ${ok ? 'identical' : 'DIFFERS'}`);
  } else {
    fs.mkdirSync(outDir, { recursive: true });
    fs.writeFileSync(p, content);
    console.log(`wrote ${path.relative(root, p)} (${content.length} bytes)`);
  }
}
if (!same) process.exit(1);
