-- spec/support/doctest.lua — the examples of the docs as tests (docs/README.md, "Examples that
-- are tested"): reads the fenced blocks of a Markdown file, pairs each ```lua block with the
-- ```output block right after it, reads the `$ ` commands of ```console blocks, runs them with
-- the build under test and compares what they print. spec/project/docs_spec.lua drives it.
--
-- Expected output is compared line by line, trailing blanks ignored. Two wildcards, for what
-- differs from run to run (times, addresses, hashes): a line that is exactly `...` stands for
-- any number of lines (none included), and `...` inside a line for any text on that line.
local M = {}

--- The fenced blocks of Markdown text: { lang =, attrs = {word, ...}, lines = {...}, line = n }
--- in order (n: the line of the opening fence). Only fences at the start of a line count.
function M.blocks(text)
  local blocks, open = {}, nil
  local n = 0
  for line in (text .. "\n"):gmatch("(.-)\n") do
    n = n + 1
    local info = line:match("^```(.*)$")
    if open then
      if info == "" then
        blocks[#blocks + 1] = open
        open = nil
      else
        open.lines[#open.lines + 1] = line
      end
    elseif info then
      local words = {}
      for w in info:gmatch("%S+") do words[#words + 1] = w end
      open = { lang = words[1] or "", attrs = { table.unpack(words, 2) }, lines = {}, line = n }
    end
  end
  return blocks
end

--- The options of a ```lua block's info string: file=NAME (the script's name, which error
--- messages show; default example.lua), env=VAR=VALUE (any number), and the word `stdout`
--- (compare standard output only; by default standard error follows it, as on a terminal).
function M.options(attrs)
  local o = { file = "example.lua", env = {}, stdout_only = false }
  for _, a in ipairs(attrs) do
    local file = a:match("^file=(.+)$")
    local env = a:match("^env=(.+)$")
    if file then o.file = file
    elseif env then o.env[#o.env + 1] = env
    elseif a == "stdout" then o.stdout_only = true
    else error("doctest: unknown option '" .. a .. "' of a ```lua block") end
  end
  return o
end

--- The examples of Markdown text: { kind = "lua", code =, options =, expected =, line = }
--- for each ```lua block followed by an ```output block, and { kind = "console",
--- command =, expected =, line = } for each `$ ` command of a ```console block.
function M.examples(text)
  local blocks, out = M.blocks(text), {}
  for i, b in ipairs(blocks) do
    local nextb = blocks[i + 1]
    if b.lang == "lua" and nextb and nextb.lang == "output" then
      out[#out + 1] = { kind = "lua", code = table.concat(b.lines, "\n") .. "\n",
                        options = M.options(b.attrs), expected = nextb.lines, line = b.line }
    elseif b.lang == "console" then
      local current
      for k, line in ipairs(b.lines) do
        local command = line:match("^%$ (.*)$")
        if command then
          current = { kind = "console", command = command, expected = {}, line = b.line + k }
          out[#out + 1] = current
        elseif current then
          current.expected[#current.expected + 1] = line
        else
          error(string.format("doctest: line %d: a ```console block starts with '$ command'", b.line + k))
        end
      end
    end
  end
  return out
end

local function trim_lines(lines)
  local t = {}
  for i, l in ipairs(lines) do t[i] = (l:gsub("%s+$", "")) end
  while #t > 0 and t[#t] == "" do t[#t] = nil end
  return t
end

local function escape(s) return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")) end

-- A Lua pattern for one expected line: "..." is any text, everything else literal.
local function line_pattern(expected)
  local parts, start = {}, 1
  while true do
    local s, e = expected:find("...", start, true)
    if not s then
      parts[#parts + 1] = escape(expected:sub(start))
      return "^" .. table.concat(parts, ".-") .. "$"
    end
    parts[#parts + 1] = escape(expected:sub(start, s - 1))
    start = e + 1
  end
end

--- Whether actual output (text) matches the expected lines; on a mismatch also a short
--- account: the first expected line that no way of matching got past, and what was there.
function M.matches(expected_lines, actual_text)
  local e = trim_lines(expected_lines)
  local a = {}
  for l in (actual_text .. "\n"):gmatch("(.-)\n") do a[#a + 1] = l end
  a = trim_lines(a)
  local patterns = {}
  for i, l in ipairs(e) do patterns[i] = l ~= "..." and line_pattern(l) or false end
  local memo, deepest = {}, { e = 1, a = 1 }
  local function match(i, j)
    local key = i * (#a + 2) + j
    if memo[key] ~= nil then return memo[key] end
    if i > deepest.e or (i == deepest.e and j > deepest.a) then deepest.e, deepest.a = i, j end
    local ok
    if i > #e then ok = j > #a
    elseif patterns[i] == false then ok = match(i + 1, j) or (j <= #a and match(i, j + 1))
    else ok = j <= #a and a[j]:find(patterns[i]) ~= nil and match(i + 1, j + 1) end
    memo[key] = ok
    return ok
  end
  if match(1, 1) then return true end
  return false, string.format("expected line %d: %q\n     got line %d: %q", deepest.e,
    e[deepest.e] or "(end of output)", deepest.a, a[deepest.a] or "(end of output)")
end

return M
