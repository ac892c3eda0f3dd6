-- spec/io/tokenizer_spec.lua — tcl.api.tokenizer, the tokenizer built from a GGUF file's
-- tokenizer.ggml.* metadata. Small vocabularies are written here by hand and every expected
-- token list is worked out in the comments from the algorithms' definitions: GPT-2's byte to
-- character mapping and pre-tokenization pattern, merges by rank (gpt2), merges by the score of
-- the merged piece with byte fallback (llama); then round trips and every error message.
local helper = require "spec.support.helper"
local tokenizer = require "tcl.api.tokenizer"

local fails_with = helper.fails_with

local function md(t) -- short keys -> GGUF keys
  local out = {}
  for k, v in pairs(t) do out["tokenizer.ggml." .. k] = v end
  return out
end

-- A gpt2 vocabulary: the 256 byte characters as ids 0..255 (id = byte value), then `extra`
-- tokens from id 256 on.
local function gpt2_tokens(extra)
  local tokens = {}
  for b = 0, 255 do tokens[b + 1] = tokenizer.byte_to_char[b] end
  for _, t in ipairs(extra or {}) do tokens[#tokens + 1] = t end
  return tokens
end

describe("gpt2 byte-level mapping", function()
  it("keeps printable bytes and moves the others to U+0100 onwards in byte order", function()
    local map = tokenizer.byte_to_char
    assert.are.equal("!", map[0x21])
    assert.are.equal("~", map[0x7E])
    assert.are.equal("\u{A1}", map[0xA1])
    assert.are.equal("\u{FF}", map[0xFF])
    -- bytes 0x00..0x20 are the first 33 non-printables: U+0100..U+0120
    assert.are.equal("\u{100}", map[0x00])
    assert.are.equal("\u{10A}", map[0x0A]) -- newline: 'Ċ'
    assert.are.equal("\u{120}", map[0x20]) -- space: 'Ġ'
    -- then 0x7F (U+0121), 0x80..0x9F (U+0122..U+0141), 0xA0 (U+0142), 0xAD (U+0143)
    assert.are.equal("\u{121}", map[0x7F])
    assert.are.equal("\u{122}", map[0x80])
    assert.are.equal("\u{141}", map[0x9F])
    assert.are.equal("\u{142}", map[0xA0])
    assert.are.equal("\u{143}", map[0xAD])
    local seen = {}
    for b = 0, 255 do
      assert.is_nil(seen[map[b]], "two bytes share a character")
      seen[map[b]] = true
    end
  end)
end)

describe("gpt2 pre-tokenization", function()
  local split = tokenizer.pre_tokenize
  it("splits contractions, letters, numbers and other characters, each with one leading space", function()
    assert.are.same({ "I", "'m", " here" }, split("I'm here"))
    assert.are.same({ "we", "'ll", " go", "'s", "'d", "'ve", "'re", "'t" }, split("we'll go's'd've're't"))
    -- the contractions are lower case: "'RE" is "'" (other) then "RE" (letters)
    assert.are.same({ "they", "'", "RE" }, split("they'RE"))
    -- " '" is a space before other characters, not a contraction
    assert.are.same({ "x", " '", "s" }, split("x 's"))
    assert.are.same({ "3", ".", "14", " apples", "!!?" }, split("3.14 apples!!?"))
    assert.are.same({ "abc", "123", "def" }, split("abc123def"))
  end)

  it("leaves the last space of a run to the word after it, and keeps trailing space whole", function()
    -- "a  b": the run "  " before "b" gives its last space to " b"
    assert.are.same({ "a", " ", " b" }, split("a  b"))
    -- " \n " before "b": `\s+(?!\S)` backs off one character
    assert.are.same({ "a", " \n", " b" }, split("a \n b"))
    assert.are.same({ "x", "   " }, split("x   "))
    -- a tab is white space but not the optional space: "\t\tx" is "\t", "\t", "x"
    assert.are.same({ "\t", "\t", "x" }, split("\t\tx"))
    assert.are.same({ "hi", "\n\n" }, split("hi\n\n"))
    assert.are.same({ "a", "\n", "\n", "b" }, split("a\n\nb"))
  end)

  it("classes UTF-8 code points: accented letters, Latin-1 numbers, emoji and CJK", function()
    assert.are.same({ "héllo", " wörld" }, split("héllo wörld"))
    assert.are.same({ "Ünïcode", "123" }, split("Ünïcode123"))
    assert.are.same({ "½", " ²" }, split("½ ²")) -- \p{N} (No) in Latin-1
    assert.are.same({ "go", " 😀!", " 日本語" }, split("go 😀! 日本語")) -- emoji and "!" are one run
    assert.are.same({ "Привет", ",", " мир" }, split("Привет, мир"))
    -- U+00A0 (no-break space) is white space, U+00D7 (×) a symbol
    assert.are.same({ "2", "\u{A0}", "×", "3" }, split("2\u{A0}×3"))
  end)

  it("keeps every byte, invalid UTF-8 included", function()
    local text = "ok\xff\xfe bad \xe2\x82 end\xc3"
    assert.are.equal(text, table.concat(split(text)))
    assert.are.same({ "ok", "\xff\xfe", " bad", " \xe2\x82", " end", "\xc3" }, split(text))
  end)
end)

describe("gpt2 pre-tokenization against Python's regex module", function()
  -- GPT-2's pattern run by the engine it is written for, on varied and on random text; the
  -- pieces come back as hex, one text per line
  local has_regex = helper.run("python3 -c 'import regex'") == 0
  local PATTERN = [[r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""]]
  local function reference(texts)
    local input = os.tmpname()
    local f = assert(io.open(input, "wb"))
    f:write(table.concat(texts, "\0"))
    f:close()
    local script = "import regex, sys\npat = regex.compile(" .. PATTERN .. ")\n" ..
      "for t in open(sys.argv[1], 'rb').read().decode('utf-8').split('\\0'):\n" ..
      "    print(' '.join(m.encode('utf-8').hex() for m in pat.findall(t)))\n"
    local status, out, err = helper.run("python3 -c " .. helper.shell_quote(script) .. " " .. helper.shell_quote(input))
    os.remove(input)
    assert.are.equal(0, status, err)
    local lines = {}
    for line in out:gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
    return lines
  end
  local function hex_pieces(text)
    local out = {}
    for i, piece in ipairs(tokenizer.pre_tokenize(text)) do
      out[i] = piece:gsub(".", function(c) return string.format("%02x", c:byte()) end)
    end
    return table.concat(out, " ")
  end

  it("splits as the reference does", function()
    if not has_regex then
      pending("python3 with the regex module is not installed (apt-get install python3-regex)")
      return
    end
    local texts = {
      "Hello, world! It's 2026.\n\nNew paragraph\twith tabs   and  spaces   ", "I'm we'll they'RE x 's",
      "emoji 😀🎉👍🏽 and family 👨‍👩‍👧", "日本語のテキスト、中文。한국어 텍스트", "नमस्ते दुनिया १२३", "مرحبا بالعالم ١٢٣",
      "Ελληνικά ½ ² ③ Ⅻ ＡＢＣ１２３", "math: ∑ x² ≤ 10⁶ → ∞", "  \u{A0}\u{2003}x\u{3000}y \u{85}z",
      "combining: e\u{301}e\u{301} a\u{308}", "ﬁne ligature, ǅ titlecase, ʰ modifier",
    }
    -- random text: code points drawn from ASCII, Latin-1 and a sample of the planes
    local rng = 12345
    local function random(n) rng = (rng * 1103515245 + 12345) % 2147483648; return rng % n end
    local pools = { { 0x20, 0x7E }, { 0x09, 0x0D }, { 0xA0, 0xFF }, { 0x100, 0x2FFF }, { 0x3000, 0xD7FF },
      { 0xE000, 0xFFFD }, { 0x10000, 0x1FFFF }, { 0x20, 0x20 } }
    for _ = 1, 200 do
      local cps = {}
      for k = 1, 1 + random(40) do
        local pool = pools[1 + random(#pools)]
        cps[k] = utf8.char(pool[1] + random(pool[2] - pool[1] + 1))
      end
      texts[#texts + 1] = table.concat(cps)
    end
    local expected = reference(texts)
    assert.are.equal(#texts, #expected)
    for i, text in ipairs(texts) do
      assert.are.equal(expected[i], hex_pieces(text), "text " .. i .. ": " .. string.format("%q", text))
    end
  end)
end)

describe("gpt2 BPE", function()
  -- ids: bytes 0..255, then bc = 256, ab = 257, abc = 258, "Ã©" (the bytes of é) = 259,
  -- <|endoftext|> = 260 (control), <|end = 261 (user-defined)
  local tokens = gpt2_tokens { "bc", "ab", "abc", "\u{C3}\u{A9}", "<|endoftext|>", "<|end" }
  local types = {}
  for i = 1, #tokens do types[i] = 1 end
  types[261], types[262] = 3, 4
  local tok = tokenizer.from_metadata(md {
    model = "gpt2", tokens = tokens, token_type = types, merges = { "b c", "a b", "a bc", "\u{C3} \u{A9}" },
    bos_token_id = 260, eos_token_id = 260,
  })

  it("merges the pair of lowest rank first, every occurrence of it", function()
    -- "abc": (a,b) rank 2, (b,c) rank 1 -> a|bc; (a,bc) rank 3 -> abc. Left to right would
    -- give ab|c and stop (no merge "ab c").
    assert.are.same({ 258 }, tok:encode("abc"))
    -- "abab": (a,b) rank 2 twice, both merged in one step -> ab|ab, no merge "ab ab"
    assert.are.same({ 257, 257 }, tok:encode("abab"))
    -- "abcb": b c first -> a|bc|b; then a bc -> abc|b ("b" is byte 98)
    assert.are.same({ 258, 98 }, tok:encode("abcb"))
    -- " ab": Ġ|a|b -> (a,b) -> Ġ|ab; no merge with Ġ (byte 32)
    assert.are.same({ 32, 257 }, tok:encode(" ab"))
    -- "cab" is one piece: c|a|b -> c|ab
    assert.are.same({ 99, 257 }, tok:encode("cab"))
  end)

  it("works on bytes: a multibyte character merges only when a merge names its bytes", function()
    -- é is C3 A9, shown as "Ã" "©"; the merge "Ã ©" makes token 259
    assert.are.same({ 259 }, tok:encode("é"))
    -- è is C3 A8: no merge, its two bytes
    assert.are.same({ 0xC3, 0xA8 }, tok:encode("è"))
    -- "😀" is F0 9F 98 80: four byte tokens
    assert.are.same({ 0xF0, 0x9F, 0x98, 0x80 }, tok:encode("😀"))
  end)

  it("adds bos and eos on request, and decode leaves control tokens out", function()
    assert.are.same({ 260, 258, 260 }, tok:encode("abc", { bos = true, eos = true }))
    assert.are.same({ 258 }, tok:encode("abc")) -- gpt2 adds nothing by default
    assert.are.equal("abc", tok:decode({ 260, 258, 260 }))
    assert.are.same({}, tok:encode(""))
  end)

  it("finds special tokens in the text only when asked to, the longest where two start together", function()
    -- "ab" | <|endoftext|> | "abc"
    assert.are.same({ 257, 260, 258 }, tok:encode("ab<|endoftext|>abc", { special = true }))
    -- <|end, the shorter, where the longer does not follow; "x" is byte 120
    assert.are.same({ 261, 120, 261 }, tok:encode("<|endx<|end", { special = true }))
    -- as plain text: "ab", "<|", "endoftext", "|>", "abc"; no merge touches the middle bytes
    assert.are.same({ 257, 60, 124, 101, 110, 100, 111, 102, 116, 101, 120, 116, 124, 62, 258 },
      tok:encode("ab<|endoftext|>abc"))
    assert.are.equal("ababc", tok:decode({ 257, 260, 258 }))
    assert.are.equal("ab<|endoftext|>abc", tok:decode({ 257, 260, 258 }, { special = true }))
    local text = "a<|end<|endoftext|>😀<|endoftext|"
    assert.are.equal(text, tok:decode(tok:encode(text, { special = true }), { special = true }))
  end)

  it("decodes to the original text: emoji, newlines, tabs, CJK, invalid bytes", function()
    local texts = {
      "Hello, world! It's 2026.\n\nNew paragraph\twith tabs   and  spaces   ",
      "emoji 😀🎉👍🏽 and family 👨‍👩‍👧 (zero-width joiners)", "日本語のテキスト、中文。", "é è ê ë ½ × ÷",
      "\0\1\2 control bytes \127", "bad utf-8 \xff\xfe\xc3", "abcabcab", " ", "\n", "",
    }
    for _, text in ipairs(texts) do
      assert.are.equal(text, tok:decode(tok:encode(text)))
    end
    local all = {}
    for b = 0, 255 do all[#all + 1] = string.char(b) end
    all = table.concat(all)
    assert.are.equal(all, tok:decode(tok:encode(all)))
  end)

  it("uses the unknown token for a piece without a token, when there is one", function()
    local partial = { "a", "b", "<unk>" } -- no "c"
    local t = tokenizer.from_metadata(md { model = "gpt2", tokens = partial, merges = {}, unknown_token_id = 2 })
    assert.are.same({ 0, 2, 1 }, t:encode("acb"))
  end)

  -- (how fast: bench, not here; on this machine about 0.01 s, timed tests fail under sanitizers)
  it("encodes 10 KB of text, many words and one long piece, and decodes it back", function()
    local words = {}
    for i = 1, 2000 do words[i] = string.format("w%dx%s", i, ("abc"):rep(i % 4)) end
    local text = table.concat(words, " "):sub(1, 10240)
    local ids = tok:encode(text)
    assert.are.equal(text, tok:decode(ids))
    -- one 10 KB piece: b c everywhere, then a bc everywhere -> 3400 tokens "abc" (258)
    ids = tok:encode(("abc"):rep(3400))
    assert.are.equal(3400, #ids)
    for i = 1, #ids do assert.are.equal(258, ids[i]) end
  end)
end)

describe("llama SentencePiece-style BPE", function()
  -- id  token     type     score
  local vocab = {
    { "<unk>", 2, 0 }, -- 0
    { "<s>", 3, 0 }, -- 1
    { "</s>", 3, 0 }, -- 2
    { "<0xC3>", 6, 0 }, -- 3
    { "<0xA9>", 6, 0 }, -- 4
    { "<0x0A>", 6, 0 }, -- 5
    { "▁", 1, -1 }, -- 6
    { "a", 1, -2 }, -- 7
    { "b", 1, -2 }, -- 8
    { "c", 1, -2 }, -- 9
    { "ab", 1, -3 }, -- 10
    { "bc", 1, -1 }, -- 11
    { "▁a", 1, -4 }, -- 12
    { "abc", 1, -0.5 }, -- 13
    { "▁abc", 1, -5 }, -- 14
    { "aa", 1, -1 }, -- 15
  }
  local function metadata(extra)
    local t = { model = "llama", tokens = {}, token_type = {}, scores = {}, bos_token_id = 1, eos_token_id = 2,
      unknown_token_id = 0 }
    for i, v in ipairs(vocab) do t.tokens[i], t.token_type[i], t.scores[i] = v[1], v[2], v[3] end
    for k, v in pairs(extra or {}) do t[k] = v end
    return md(t)
  end
  local tok = tokenizer.from_metadata(metadata())

  it("merges the pair whose merged piece scores highest", function()
    -- "abc" -> "▁abc" = ▁|a|b|c. Pairs: ▁a -4, ab -3, bc -1: bc -> ▁|a|bc.
    -- Pairs: ▁a -4, abc -0.5: abc -> ▁|abc. Pair ▁abc -5 -> ▁abc (14). bos first by default.
    assert.are.same({ 1, 14 }, tok:encode("abc"))
    -- "a b" -> ▁|a|▁|b: only ▁a is a token -> ▁a|▁|b
    assert.are.same({ 12, 6, 8 }, tok:encode("a b", { bos = false }))
  end)

  it("breaks ties between equal scores by the leftmost pair", function()
    -- "aaa" -> ▁|a|a|a: pairs ▁a -4, aa -1, aa -1: the left aa -> ▁|aa|a; neither "▁aa" nor
    -- "aaa" is a token. (The right one first would give ▁|a|aa, then ▁a|aa.)
    assert.are.same({ 6, 15, 7 }, tok:encode("aaa", { bos = false }))
  end)

  it("falls back to byte tokens, then to the unknown token", function()
    -- "é" -> ▁|é: "é" is no token; its bytes C3 A9 are <0xC3> <0xA9>
    assert.are.same({ 6, 3, 4 }, tok:encode("é", { bos = false }))
    -- "a\nb" -> ▁|a|\n|b: ▁a -> ▁a|\n|b; the newline is <0x0A>
    assert.are.same({ 12, 5, 8 }, tok:encode("a\nb", { bos = false }))
    -- "z" has no token and no <0x7A>: the unknown token, once
    assert.are.same({ 6, 0 }, tok:encode("z", { bos = false }))
  end)

  it("adds the leading space only when add_space_prefix allows, and eos on request", function()
    local plain = tokenizer.from_metadata(metadata { add_space_prefix = false, add_bos_token = false })
    -- a|b|c -> a|bc -> abc
    assert.are.same({ 13 }, plain:encode("abc"))
    assert.are.same({ 13, 2 }, plain:encode("abc", { eos = true }))
    assert.are.same({}, tok:encode("", { bos = false }))
  end)

  it("puts the leading space before the text only, not after a special token", function()
    -- "ab" at the start -> ▁|a|b: ab -3 beats ▁a -4 -> ▁|ab ("▁ab" is no token); then </s>;
    -- then "abc" without a space: a|b|c -> a|bc -> abc
    local ids = tok:encode("ab</s>abc", { special = true, bos = false })
    assert.are.same({ 6, 10, 2, 13 }, ids)
    assert.are.equal("ab</s>abc", tok:decode(ids, { special = true }))
    assert.are.equal("<s>ab", tok:decode({ 1, 6, 10 }, { special = true }))
  end)

  it("decodes spaces, byte tokens and control tokens, without the added leading space", function()
    assert.are.equal("abc é", tok:decode({ 1, 14, 6, 3, 4, 2 }))
    for _, text in ipairs { "abc aa\naab", "é abc", "  ab  c", "ab\n" } do
      assert.are.equal(text, tok:decode(tok:encode(text)))
    end
  end)

  it("encodes 10 KB of text and decodes it back", function()
    local text = ("abc aab ba cab\n"):rep(700):sub(1, 10240)
    local ids = tok:encode(text)
    assert.are.equal(text, tok:decode(ids))
  end)
end)

describe("tokenizer errors", function()
  local good = { model = "gpt2", tokens = { "a", "b", "ab" }, merges = { "a b" } }
  local function with(changes)
    local t = {}
    for k, v in pairs(good) do t[k] = v end
    for k, v in pairs(changes) do t[k] = v end
    return md(t)
  end
  local from = tokenizer.from_metadata

  it("names a missing key, a wrong type or model, and mismatched lengths", function()
    fails_with("tokenizer.from_metadata: expected a table of GGUF metadata, got string", from, "x")
    fails_with("missing key 'tokenizer.ggml.model'", from, {})
    fails_with("'tokenizer.ggml.model' is \"bert\"; supported: \"gpt2\"", from, with { model = "bert" })
    fails_with("missing key 'tokenizer.ggml.tokens'", from, md { model = "gpt2" })
    fails_with("'tokenizer.ggml.tokens' must be an array, got string", from, with { tokens = "ab" })
    fails_with("'tokenizer.ggml.tokens'[2] must be a string, got number", from, with { tokens = { "a", 7 } })
    fails_with("'tokenizer.ggml.tokens' is empty", from, with { tokens = {} })
    fails_with("missing key 'tokenizer.ggml.merges'", from, md { model = "gpt2", tokens = { "a" } })
    fails_with("'tokenizer.ggml.token_type' has 2 entries but 'tokenizer.ggml.tokens' has 3", from,
      with { token_type = { 1, 1 } })
    fails_with("'tokenizer.ggml.token_type'[1] must be an integer, got number", from,
      with { token_type = { 1.5, 1, 1 } })
    fails_with("missing key 'tokenizer.ggml.scores'", from, with { model = "llama" })
    fails_with("'tokenizer.ggml.scores' has 1 entries but 'tokenizer.ggml.tokens' has 3", from,
      with { model = "llama", scores = { 0 } })
    fails_with("'tokenizer.ggml.bos_token_id' is 3, outside the vocabulary's ids 0..2", from,
      with { bos_token_id = 3 })
    fails_with("'tokenizer.ggml.eos_token_id' must be an integer token id, got string", from,
      with { eos_token_id = "2" })
    fails_with("'tokenizer.ggml.add_bos_token' must be a boolean, got number", from, with { add_bos_token = 1 })
  end)

  it("names a malformed merge and a merge naming an unknown token", function()
    fails_with("'tokenizer.ggml.merges'[1] is \"ab\", not two tokens separated by one space", from,
      with { merges = { "ab" } })
    fails_with("'tokenizer.ggml.merges'[2] 'a c' names 'c', which is not a token of the vocabulary", from,
      with { merges = { "a b", "a c" } })
    -- the merged piece must be a token too
    fails_with("'tokenizer.ggml.merges'[1] 'b a' names 'ba', which is not a token", from, with { merges = { "b a" } })
  end)

  it("names bad arguments of encode and decode, and ids out of range", function()
    local tok = from(with {})
    fails_with("Tokenizer:encode: text must be a string, got number", tok.encode, tok, 5)
    fails_with("Tokenizer:encode: options must be a table, got boolean", tok.encode, tok, "a", true)
    fails_with("Tokenizer:encode: option 'bos' must be a boolean, got number", tok.encode, tok, "a", { bos = 1 })
    fails_with("Tokenizer:encode: bos = true but the vocabulary has no 'tokenizer.ggml.bos_token_id'",
      tok.encode, tok, "a", { bos = true })
    fails_with("call it as tok:encode(text), with a colon", tok.encode, "a")
    fails_with("Tokenizer:encode: option 'special' must be a boolean, got string",
      tok.encode, tok, "a", { special = "y" })
    fails_with("Tokenizer:decode: option 'special' must be a boolean, got number",
      tok.decode, tok, { 0 }, { special = 1 })
    fails_with("Tokenizer:decode: options must be a table, got boolean", tok.decode, tok, { 0 }, true)
    fails_with("Tokenizer:decode: ids[2] = 3 is outside the vocabulary's ids 0..2", tok.decode, tok, { 0, 3 })
    fails_with("Tokenizer:decode: ids[1] = -1 is outside", tok.decode, tok, { -1 })
    fails_with("Tokenizer:decode: ids[1] must be an integer token id, got float", tok.decode, tok, { 1.5 })
    fails_with("Tokenizer:decode: expected an array of token ids, got string", tok.decode, tok, "0")
  end)

  it("names text that has no token when there is no unknown token", function()
    local tok = from(with {})
    fails_with("Tokenizer:encode: piece \"c\" of the text has no token and the vocabulary has no unknown_token_id",
      tok.encode, tok, "c")
    local llama = from(md { model = "llama", tokens = { "▁", "a" }, scores = { 0, 0 } })
    fails_with("Tokenizer:encode: byte 0x7A of the text has no token <0x7A> and the vocabulary has no unknown_token_id",
      llama.encode, llama, "az")
    -- a gpt2 token holding a raw space (U+0020, which the mapping writes as U+0120) decodes to no byte
    local raw = from(md { model = "gpt2", tokens = { "a b" }, merges = {} })
    fails_with("Tokenizer:decode: token 0 \"a b\" holds U+0020, which stands for no byte", raw.decode, raw, { 0 })
  end)
end)

describe("tokenizer metadata fuzz", function()
  -- every key of a good gpt2 and a good llama vocabulary replaced by values of the wrong kind, or
  -- its arrays spoiled; from_metadata either fails with its own message or builds a tokenizer
  -- whose encode and decode fail only with theirs (never "attempt to index a nil value")
  local function base(model)
    local tokens = gpt2_tokens { "ab", "\u{2581}", "\u{2581}a", "<0x41>" }
    local t = { model = model, tokens = tokens, merges = { "a b" }, scores = {}, token_type = {},
      bos_token_id = 1, eos_token_id = 2, unknown_token_id = 3 }
    for i = 1, #tokens do t.scores[i], t.token_type[i] = -i / 7, 1 end
    t.token_type[#tokens] = 6
    return t
  end
  local function spoiled_arrays(v, rng)
    local a = {}
    for i = 1, #v do a[i] = v[i] end
    local which = rng(6)
    if which == 1 then a[rng(#a)] = nil
    elseif which == 2 then a[rng(#a)] = ({ 1.5, "x", true, {}, -7, 2 ^ 63 })[rng(6)]
    elseif which == 3 then a[#a] = nil
    elseif which == 4 then a[#a + 1] = a[1]
    elseif which == 5 then a = { a[1] }
    else a[rng(#a)] = ({ "", "a  b", " a", "\xff\xfe", "<0xZZ>", "a b c" })[rng(6)] end
    return a
  end
  local BAD = { false, 0, -1, 2 ^ 40, 1.5, "", "gpt2", "llama", {}, { 1, 2 }, function() end }

  it("never fails without a message of its own", function()
    local state = 99
    local function rng(n) state = (state * 1103515245 + 12345) % 2147483648; return 1 + state % n end
    local keys = { "model", "tokens", "merges", "scores", "token_type", "bos_token_id", "eos_token_id",
      "unknown_token_id", "add_bos_token", "add_space_prefix" }
    local built = 0
    for _ = 1, 3000 do
      local t = base(rng(2) == 1 and "gpt2" or "llama")
      for _ = 1, rng(2) do
        local key = keys[rng(#keys)]
        local v = t[key]
        if type(v) == "table" and #v > 0 and rng(2) == 1 then t[key] = spoiled_arrays(v, rng)
        else t[key] = BAD[rng(#BAD + 1)] end -- one past the end: nil, a missing key
      end
      local ok, tok = pcall(tokenizer.from_metadata, md(t))
      if not ok then
        assert.is_truthy(tostring(tok):find("tokenizer.from_metadata: ", 1, true), tostring(tok))
      else
        built = built + 1
        local ok_encode, ids = pcall(tok.encode, tok, "ab ab aab a\n\xffA😀 z", { bos = false })
        if not ok_encode then
          assert.is_truthy(tostring(ids):find("Tokenizer:encode: ", 1, true), tostring(ids))
          ids = { 0, 1 }
        end
        ids[#ids + 1] = rng(tok.vocab_size) - 1
        local ok_decode, err = pcall(tok.decode, tok, ids)
        if not ok_decode then assert.is_truthy(tostring(err):find("Tokenizer:decode: ", 1, true), tostring(err)) end
      end
    end
    assert.is_true(built > 100, "only " .. built .. " tokenizers were built")
  end)
end)
