-- tcl.api.tokenizer — a language model's tokenizer built from the vocabulary a GGUF file carries
-- (its tokenizer.ggml.* metadata), in plain Lua: byte-level BPE ("gpt2": GPT-2's byte to
-- code point mapping, its pre-tokenization and merges by rank) and SentencePiece-style BPE
-- ("llama": spaces as U+2581, merges chosen by the score of the merged piece, byte fallback).
-- Layer: lua/tcl/api (requires only the API's error convention; no tensors).
--
-- Token ids are the file's ids: 0-based, so that tokenizer.ggml.bos_token_id and the ids other
-- tools print mean the same token here. They are identifiers, not positions in a Lua table (the
-- token with id i is tokens[i + 1] of the metadata); tcl.nn.Embedding's indices are 1-based, so
-- a model looks a token up at id + 1.
--
-- GPT-2's Unicode classes (\p{L}, \p{N}, \s) come from a generated table
-- (tcl.api.unicode_classes), exact for the Unicode version it was made from. Every
-- byte of the text lands in exactly one piece, so decode(encode(text)) == text for any text,
-- invalid UTF-8 included. Special tokens written in the text are encoded as plain text
-- unless encode is given {special = true}.
local check = require "tcl.api.check"
local quote = require "tcl.quote"

local fail = check.fail
local M = {}

local KEY = "tokenizer.ggml."
-- token_type values of GGUF (llama.cpp's numbering): which ids are text and which are not
local TYPE_NORMAL, TYPE_CONTROL, TYPE_USER, TYPE_UNUSED, TYPE_BYTE = 1, 3, 4, 5, 6 -- 2: unknown
local SPACE_MARK = "\u{2581}" -- SentencePiece's visible space

-- ---------------------------------------------------------------------------------------------
-- Metadata checks: each names the key and, for an element, its position in the Lua array
-- (1-based: the element for token id i is at [i + 1]).

local function get(md, name) return md[KEY .. name] end

local function array_of(fn, md, name, element_type, required)
  local v = get(md, name)
  if v == nil then
    if required then fail(fn, "missing key '%s%s'", KEY, name) end
    return nil
  end
  if type(v) ~= "table" then fail(fn, "'%s%s' must be an array, got %s", KEY, name, check.type_name(v)) end
  local n = #v
  for i = 1, n do
    local e = v[i]
    local ok
    if element_type == "integer" then ok = math.type(e) == "integer" else ok = type(e) == element_type end
    if not ok then
      fail(fn, "'%s%s'[%d] must be %s %s, got %s", KEY, name, i, element_type == "integer" and "an" or "a",
        element_type, check.type_name(e))
    end
  end
  return v
end

local function same_length(fn, name, array, tokens)
  if array and #array ~= #tokens then
    fail(fn, "'%s%s' has %d entries but '%stokens' has %d (one per token)", KEY, name, #array, KEY, #tokens)
  end
end

local function token_id(fn, md, name, vocab_size)
  local v = get(md, name)
  if v == nil then return nil end
  if math.type(v) ~= "integer" then
    fail(fn, "'%s%s' must be an integer token id, got %s", KEY, name, check.type_name(v))
  end
  if v < 0 or v >= vocab_size then
    fail(fn, "'%s%s' is %d, outside the vocabulary's ids 0..%d", KEY, name, v, vocab_size - 1)
  end
  return v
end

local function flag(fn, md, name, default)
  local v = get(md, name)
  if v == nil then return default end
  if type(v) ~= "boolean" then fail(fn, "'%s%s' must be a boolean, got %s", KEY, name, check.type_name(v)) end
  return v
end

-- ---------------------------------------------------------------------------------------------
-- UTF-8: the text as code points with their byte ranges. A byte that starts no valid sequence is
-- a code point of its own (-1 - byte, classed "other"), so every byte of the text stays in
-- exactly one piece.

local function decode_utf8(text)
  local cps, starts = {}, {}
  local i, n, count = 1, #text, 0
  while i <= n do
    local b = text:byte(i)
    local len, cp = 1, nil
    if b < 0x80 then cp = b
    elseif b >= 0xC2 and b <= 0xF4 then
      len = b < 0xE0 and 2 or b < 0xF0 and 3 or 4
      if i + len - 1 <= n then
        cp = b & (0x7F >> len)
        for k = 1, len - 1 do
          local c = text:byte(i + k)
          if c & 0xC0 ~= 0x80 then cp = nil break end
          cp = (cp << 6) | (c & 0x3F)
        end
        -- overlong forms, surrogates and values past U+10FFFF are not valid UTF-8
        if cp and ((len == 3 and cp < 0x800) or (len == 4 and (cp < 0x10000 or cp > 0x10FFFF))
            or (cp >= 0xD800 and cp <= 0xDFFF)) then cp = nil end
      end
      if not cp then len = 1 end
    end
    count = count + 1
    cps[count], starts[count] = cp or (-1 - b), i
    i = i + len
  end
  starts[count + 1] = n + 1
  return cps, starts, count
end

-- GPT-2's classes: "L" letter, "N" number, "S" white space, "O" anything else.
local LATIN1 = {} -- U+0080..U+00FF
for cp = 0x80, 0xFF do LATIN1[cp] = (cp >= 0xC0 and cp ~= 0xD7 and cp ~= 0xF7) and "L" or "O" end
LATIN1[0x85], LATIN1[0xA0] = "S", "S"
for _, cp in ipairs { 0xAA, 0xB5, 0xBA } do LATIN1[cp] = "L" end
for _, cp in ipairs { 0xB2, 0xB3, 0xB9, 0xBC, 0xBD, 0xBE } do LATIN1[cp] = "N" end

-- Past Latin-1: the ranges of letters, numbers and white space (all else is other), generated
-- from the classes of the regex engine GPT-2's pattern is written for
-- (scripts/gen_unicode_classes.py).
local RANGES = require "tcl.api.unicode_classes"

local function class_of(cp)
  if cp < 0 then return "O" end -- a byte of invalid UTF-8
  if cp < 0x80 then
    if (cp >= 0x41 and cp <= 0x5A) or (cp >= 0x61 and cp <= 0x7A) then return "L" end
    if cp >= 0x30 and cp <= 0x39 then return "N" end
    if cp == 0x20 or (cp >= 0x09 and cp <= 0x0D) then return "S" end
    return "O"
  end
  if cp <= 0xFF then return LATIN1[cp] end
  local lo, hi = 1, #RANGES -- binary search for the last range starting at or before cp
  while lo < hi do
    local mid = (lo + hi + 1) // 2
    if RANGES[mid][1] <= cp then lo = mid else hi = mid - 1 end
  end
  local r = RANGES[lo]
  if r[1] <= cp and cp <= r[2] then return r[3] end
  return "O"
end
M.class_of = class_of -- for the spec

-- GPT-2's pre-tokenization, the alternatives of its pattern tried in order at each position:
--   's|'t|'re|'ve|'m|'ll|'d   then ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`,
--   then `\s+(?!\S)` (a run of white space that leaves its last character to the next piece
--   when a non-space follows), then `\s+`.
-- Calls emit(first_byte, last_byte) for each piece, in order.
local CONTRACTIONS = { s = 1, t = 1, m = 1, d = 1, re = 2, ve = 2, ll = 2 }

local function pre_tokenize(text, emit)
  local cps, starts, n = decode_utf8(text)
  local cls = {}
  for i = 1, n do cls[i] = class_of(cps[i]) end
  local i = 1
  while i <= n do
    local j -- the last code point of the piece that starts at i
    if cps[i] == 0x27 then -- an apostrophe: the contractions are ASCII, lower case
      local one = i + 1 <= n and cps[i + 1] < 0x80 and cps[i + 1] >= 0 and string.char(cps[i + 1]) or ""
      local two = i + 2 <= n and cps[i + 2] < 0x80 and cps[i + 2] >= 0 and one .. string.char(cps[i + 2]) or ""
      if CONTRACTIONS[two] == 2 then j = i + 2 elseif CONTRACTIONS[one] == 1 then j = i + 1 end
    end
    if not j then
      local k = (cps[i] == 0x20 and i < n and cls[i + 1] ~= "S") and i + 1 or i -- the optional space
      local c = cls[k]
      if c ~= "S" then
        j = k
        while j < n and cls[j + 1] == c do j = j + 1 end
      else -- white space
        j = i
        while j < n and cls[j + 1] == "S" do j = j + 1 end
        if j < n and j > i then j = j - 1 end -- `\s+(?!\S)` gives its last space to the next piece
      end
    end
    emit(starts[i], starts[j + 1] - 1)
    i = j + 1
  end
end
M.pre_tokenize = function(text) -- the pieces, for the spec
  local pieces = {}
  pre_tokenize(text, function(a, b) pieces[#pieces + 1] = text:sub(a, b) end)
  return pieces
end

-- GPT-2's byte to code point mapping: the printable bytes stand for themselves, the others
-- (controls, space, DEL, NBSP, soft hyphen...) for U+0100 onwards in byte order, so that every
-- token is printable text.
local BYTE_TO_CHAR, CHAR_TO_BYTE = {}, {}
do
  local next_cp = 0x100
  for b = 0, 255 do
    local printable = (b >= 0x21 and b <= 0x7E) or (b >= 0xA1 and b <= 0xAC) or (b >= 0xAE and b <= 0xFF)
    local cp = printable and b or next_cp
    if not printable then next_cp = next_cp + 1 end
    BYTE_TO_CHAR[b] = utf8.char(cp)
    CHAR_TO_BYTE[utf8.char(cp)] = b
  end
end
M.byte_to_char = BYTE_TO_CHAR

-- ---------------------------------------------------------------------------------------------
-- The tokenizer object.

local Tokenizer = { __name = "Tokenizer" }
Tokenizer.__index = Tokenizer

local function is_text_type(t) return t == TYPE_NORMAL or t == TYPE_USER end

-- id of a piece of text, for the pieces BPE produces: normal and user-defined tokens only
-- (a control token "<s>" or a byte token "<0x41>" is never made from the same letters in text)
local function text_ids(tokens, types)
  local ids = {}
  for i = #tokens, 1, -1 do -- the lowest id wins when a text appears twice
    if types == nil or is_text_type(types[i]) then ids[tokens[i]] = i - 1 end
  end
  return ids
end

local function gpt2_merges(fn, merges, tokens)
  local all = {}
  for i = #tokens, 1, -1 do all[tokens[i]] = i - 1 end
  local ranks = {}
  for r, m in ipairs(merges) do
    local a, b = m:match("^([^ ]+) ([^ ]+)$")
    if not a then
      fail(fn, "'%smerges'[%d] is %s, not two tokens separated by one space", KEY, r, quote(string.format("%q", m)))
    end
    for _, part in ipairs { a, b, a .. b } do
      if all[part] == nil then
        fail(fn, "'%smerges'[%d] %s names %s, which is not a token of the vocabulary", KEY, r,
          quote("'" .. m .. "'"), quote("'" .. part .. "'"))
      end
    end
    local row = ranks[a]
    if not row then row = {}; ranks[a] = row end
    if row[b] == nil then row[b] = r end -- a repeated merge keeps its first (best) rank
  end
  return ranks
end

--- tokenizer.from_metadata(metadata) -> a tokenizer for the vocabulary in `metadata`, a table of
--  GGUF metadata by key ("tokenizer.ggml.model", "tokenizer.ggml.tokens", ...; other keys are
--  ignored). Models: "gpt2" (byte-level BPE: tokens and merges) and "llama" (SentencePiece-style
--  BPE: tokens and scores). token_type, bos/eos/unknown_token_id, add_bos_token, add_eos_token
--  and add_space_prefix (llama) are optional. Its methods: encode(text, {bos =, eos =, special =})
--  -> ids and decode(ids, {special =}) -> text; fields model, vocab_size, bos_token_id,
--  eos_token_id, unknown_token_id. Arrays are Lua arrays (1-based); token ids are the file's
--  (0-based): the token with id i is tokens[i + 1].
function M.from_metadata(metadata)
  local fn = "tokenizer.from_metadata"
  if type(metadata) ~= "table" then
    fail(fn, "expected a table of GGUF metadata, got %s", check.type_name(metadata))
  end
  local model = get(metadata, "model")
  if model == nil then fail(fn, "missing key '%smodel'", KEY) end
  if model ~= "gpt2" and model ~= "llama" then
    fail(fn, "'%smodel' is %s; supported: \"gpt2\" (byte-level BPE), \"llama\" (SentencePiece-style BPE)",
      KEY, quote(type(model) == "string" and string.format("%q", model) or check.type_name(model)))
  end
  local tokens = array_of(fn, metadata, "tokens", "string", true)
  if #tokens == 0 then fail(fn, "'%stokens' is empty", KEY) end
  local types = array_of(fn, metadata, "token_type", "integer", false)
  same_length(fn, "token_type", types, tokens)
  local self = setmetatable({
    model = model, tokens = tokens, types = types, vocab_size = #tokens,
    bos_token_id = token_id(fn, metadata, "bos_token_id", #tokens),
    eos_token_id = token_id(fn, metadata, "eos_token_id", #tokens),
    unknown_token_id = token_id(fn, metadata, "unknown_token_id", #tokens),
    add_bos = flag(fn, metadata, "add_bos_token", model == "llama"),
    add_eos = flag(fn, metadata, "add_eos_token", false),
    ids = text_ids(tokens, types),
    cache = {}, decoded = {},
  }, Tokenizer)
  -- the tokens encode({special = true}) finds in the text: control and user-defined ones,
  -- longest first so that the longer wins where two start at the same place
  self.specials = {}
  for i, t in ipairs(tokens) do
    if types and (types[i] == TYPE_CONTROL or types[i] == TYPE_USER) and t ~= "" then
      self.specials[#self.specials + 1] = { text = t, id = i - 1 }
    end
  end
  table.sort(self.specials, function(x, y)
    if #x.text ~= #y.text then return #x.text > #y.text end
    return x.id < y.id
  end)
  if model == "gpt2" then
    self.ranks = gpt2_merges(fn, array_of(fn, metadata, "merges", "string", true), tokens)
  else
    local scores = array_of(fn, metadata, "scores", "number", true)
    same_length(fn, "scores", scores, tokens)
    self.scores = scores
    self.add_space_prefix = flag(fn, metadata, "add_space_prefix", true)
    -- byte fallback: the tokens named <0xNN> (of type byte when the file gives types)
    self.byte_ids = {}
    for i, t in ipairs(tokens) do
      local hex = t:match("^<0x(%x%x)>$")
      if hex and (types == nil or types[i] == TYPE_BYTE) then
        local b = tonumber(hex, 16)
        if self.byte_ids[b] == nil then self.byte_ids[b] = i - 1 end
      end
    end
  end
  return self
end

-- gpt2: the ids of one pre-tokenized piece. Its bytes as mapped characters, then, while some
-- adjacent pair has a merge, every occurrence of the pair of lowest rank merged, left to right.
local function gpt2_piece(self, fn, piece)
  local cached = self.cache[piece]
  if cached then return cached end
  local syms, n = {}, #piece
  for i = 1, n do syms[i] = BYTE_TO_CHAR[piece:byte(i)] end
  local ranks = self.ranks
  while n > 1 do
    local best, best_a, best_b = math.huge, nil, nil
    for i = 1, n - 1 do
      local row = ranks[syms[i]]
      local r = row and row[syms[i + 1]]
      if r and r < best then best, best_a, best_b = r, syms[i], syms[i + 1] end
    end
    if not best_a then break end
    local out, m, i = {}, 0, 1
    while i <= n do
      if i < n and syms[i] == best_a and syms[i + 1] == best_b then
        m = m + 1; out[m] = best_a .. best_b; i = i + 2
      else
        m = m + 1; out[m] = syms[i]; i = i + 1
      end
    end
    syms, n = out, m
  end
  local ids = {}
  for i = 1, n do
    local id = self.ids[syms[i]]
    if id == nil then
      id = self.unknown_token_id
      if id == nil then
        fail(fn, "piece %s of the text has no token and the vocabulary has no unknown_token_id",
          quote(string.format("%q", syms[i])))
      end
    end
    ids[i] = id
  end
  -- words repeat, long runs (a base64 blob, a line of "=") rarely do: cache only the short ones
  if #piece <= 64 then self.cache[piece] = ids end
  return ids
end

-- A binary heap of merge candidates, best first: the higher score, then the leftmost.
local function better(x, y)
  if x.score ~= y.score then return x.score > y.score end
  return x.left < y.left
end

local function heap_push(heap, item)
  local n = #heap + 1
  heap[n] = item
  while n > 1 do
    local parent = n // 2
    if not better(heap[n], heap[parent]) then break end
    heap[n], heap[parent] = heap[parent], heap[n]
    n = parent
  end
end

local function heap_pop(heap)
  local top, n = heap[1], #heap
  heap[1] = heap[n]
  heap[n] = nil
  n = n - 1
  local i = 1
  while true do
    local l, r, best = 2 * i, 2 * i + 1, i
    if l <= n and better(heap[l], heap[best]) then best = l end
    if r <= n and better(heap[r], heap[best]) then best = r end
    if best == i then break end
    heap[i], heap[best] = heap[best], heap[i]
    i = best
  end
  return top
end

-- llama: the text with spaces as U+2581 (and one before it), as code points, merged pair by
-- pair: always the adjacent pair whose concatenation is a token of the highest score (ties: the
-- leftmost). A final piece that is no token is spelled with the byte tokens <0xNN>.
local function llama_encode(self, fn, text, ids, at_start)
  if text == "" then return end
  text = (self.add_space_prefix and at_start and SPACE_MARK or "") .. text:gsub(" ", SPACE_MARK)
  local _, starts, n = decode_utf8(text)
  -- symbol i covers bytes first[i]..last[i]; prev/next link the live ones
  local first, last, prev, nxt = {}, {}, {}, {}
  for i = 1, n do first[i], last[i], prev[i], nxt[i] = starts[i], starts[i + 1] - 1, i - 1, i + 1 end
  nxt[n] = 0
  local heap, scores, vocab = {}, self.scores, self.ids
  local function candidate(l, r)
    if l == 0 or r == 0 then return end
    local id = vocab[text:sub(first[l], last[r])]
    if id then heap_push(heap, { score = scores[id + 1], left = first[l], l = l, r = r, size = last[r] - first[l] }) end
  end
  for i = 1, n - 1 do candidate(i, i + 1) end
  while #heap > 0 do
    local c = heap_pop(heap)
    local l, r = c.l, c.r
    -- stale when either side has merged since (its extent changed) or r is gone
    if first[l] and first[r] and nxt[l] == r and last[r] - first[l] == c.size then
      last[l] = last[r]
      nxt[l] = nxt[r]
      if nxt[r] ~= 0 then prev[nxt[r]] = l end
      first[r] = nil
      candidate(prev[l], l)
      candidate(l, nxt[l])
    end
  end
  local i = 1
  while i ~= 0 do
    local piece = text:sub(first[i], last[i])
    local id = vocab[piece]
    if id then ids[#ids + 1] = id
    else
      local missing -- the first byte of the piece without a <0xNN> token
      for k = 1, #piece do
        if self.byte_ids[piece:byte(k)] == nil then missing = piece:byte(k) break end
      end
      if not missing then
        for k = 1, #piece do ids[#ids + 1] = self.byte_ids[piece:byte(k)] end
      elseif self.unknown_token_id then -- the unknown token stands for the whole piece, once
        ids[#ids + 1] = self.unknown_token_id
      else
        fail(fn, "byte 0x%02X of the text has no token <0x%02X> and the vocabulary has no unknown_token_id",
          missing, missing)
      end
    end
    i = nxt[i]
  end
end

local ENCODE_OPTIONS, DECODE_OPTIONS = { bos = true, eos = true, special = true }, { special = true }

-- opts[name]: nil or a boolean
local function boolean_option(fn, opts, name)
  local v = opts[name]
  if v ~= nil and type(v) ~= "boolean" then
    fail(fn, "option '%s' must be a boolean, got %s", name, check.type_name(v))
  end
  return v
end

local function bos_eos(self, fn, which, opts)
  local v = boolean_option(fn, opts, which)
  if v == nil then return which == "bos" and self.add_bos or self.add_eos end
  if v and self[which .. "_token_id"] == nil then
    fail(fn, "%s = true but the vocabulary has no '%s%s_token_id'", which, KEY, which)
  end
  return v
end

--- tok:encode(text, opts) -> the token ids of `text` (a Lua array of the file's 0-based ids).
--  opts.bos / opts.eos (booleans) put the bos / eos token first / last; by default as the
--  metadata's add_bos_token / add_eos_token say (llama: bos, gpt2: neither, when absent).
--  opts.special = true finds the texts of control and user-defined tokens ("<|endoftext|>",
--  "<s>") in the text and gives their ids (by default they are plain text); llama's leading
--  space goes before the text only, not after each special token.
function Tokenizer:encode(text, opts)
  local fn = "Tokenizer:encode"
  if getmetatable(self) ~= Tokenizer then fail(fn, "call it as tok:encode(text), with a colon") end
  if type(text) ~= "string" then fail(fn, "text must be a string, got %s", check.type_name(text)) end
  opts = check.options(fn, opts, ENCODE_OPTIONS)
  local bos, eos = bos_eos(self, fn, "bos", opts), bos_eos(self, fn, "eos", opts)
  local parse_special = boolean_option(fn, opts, "special")
  local ids = {}
  if bos then ids[1] = self.bos_token_id end
  local function plain(segment, at_start)
    if self.model == "gpt2" then
      pre_tokenize(segment, function(a, b)
        for _, id in ipairs(gpt2_piece(self, fn, segment:sub(a, b))) do ids[#ids + 1] = id end
      end)
    else
      llama_encode(self, fn, segment, ids, at_start)
    end
  end
  if parse_special and #self.specials > 0 then
    -- the earliest special token's text in what is left (the longest where several start there);
    -- each one's next occurrence is looked up again only once the scan has passed it
    local specials, next_at, pos = self.specials, {}, 1
    for k, sp in ipairs(specials) do next_at[k] = text:find(sp.text, 1, true) or false end
    while true do
      local best, best_at
      for k, sp in ipairs(specials) do
        local at = next_at[k]
        if at and at < pos then at = text:find(sp.text, pos, true) or false; next_at[k] = at end
        if at and (best_at == nil or at < best_at) then best, best_at = k, at end
      end
      if not best then plain(text:sub(pos), pos == 1) break end
      plain(text:sub(pos, best_at - 1), pos == 1)
      ids[#ids + 1] = specials[best].id
      pos = best_at + #specials[best].text
    end
  else
    plain(text, true)
  end
  if eos then ids[#ids + 1] = self.eos_token_id end
  return ids
end

-- The bytes one id stands for in decoded text: control and unused tokens none; byte tokens
-- their byte; gpt2 normal tokens their characters mapped back to bytes; user-defined tokens
-- their text as written.
local function piece_bytes(self, fn, id)
  local cached = self.decoded[id]
  if cached then return cached end
  local text, t = self.tokens[id + 1], self.types and self.types[id + 1] or TYPE_NORMAL
  local out
  if t == TYPE_CONTROL or t == TYPE_UNUSED then out = ""
  elseif t == TYPE_USER then out = text
  elseif t == TYPE_BYTE and text:match("^<0x%x%x>$") then out = string.char(tonumber(text:sub(4, 5), 16))
  elseif self.model == "llama" then out = (text:gsub(SPACE_MARK, " "))
  else
    local bytes = {}
    local cps, _, n = decode_utf8(text)
    for k = 1, n do
      local cp = cps[k]
      local b = cp >= 0 and CHAR_TO_BYTE[utf8.char(cp)]
      if not b then
        fail(fn, "token %d %s holds U+%04X, which stands for no byte in GPT-2's byte-level mapping", id,
          quote(string.format("%q", text)), cp < 0 and -1 - cp or cp)
      end
      bytes[#bytes + 1] = string.char(b)
    end
    out = table.concat(bytes)
  end
  self.decoded[id] = out
  return out
end

--- tok:decode(ids, opts) -> the text of a Lua array of token ids (the file's 0-based ids);
--  control tokens (bos, eos) add nothing, so decode(encode(text, {bos = true})) == text, unless
--  opts.special = true, which writes their text (decode(encode(t, {special = true}), {special =
--  true}) == t). For llama the space encode put before the text is taken off again.
function Tokenizer:decode(ids, opts)
  local fn = "Tokenizer:decode"
  if getmetatable(self) ~= Tokenizer then fail(fn, "call it as tok:decode(ids), with a colon") end
  if type(ids) ~= "table" then fail(fn, "expected an array of token ids, got %s", check.type_name(ids)) end
  local with_special = boolean_option(fn, check.options(fn, opts, DECODE_OPTIONS), "special")
  -- llama: the space encode added is the first character of the first piece of text
  local strip = self.model == "llama" and self.add_space_prefix
  local parts = {}
  for i = 1, #ids do
    local id = ids[i]
    if math.type(id) ~= "integer" then
      fail(fn, "ids[%d] must be an integer token id, got %s", i, math.type(id) or check.type_name(id))
    end
    if id < 0 or id >= self.vocab_size then
      fail(fn, "ids[%d] = %d is outside the vocabulary's ids 0..%d", i, id, self.vocab_size - 1)
    end
    local t = self.types and self.types[id + 1]
    if with_special and t == TYPE_CONTROL then parts[i] = self.tokens[id + 1]
    else
      local piece = piece_bytes(self, fn, id)
      if strip and piece ~= "" then
        if piece:sub(1, 1) == " " and (t == nil or t == TYPE_NORMAL) then piece = piece:sub(2) end
        strip = false
      end
      parts[i] = piece
    end
  end
  return table.concat(parts)
end

return M
