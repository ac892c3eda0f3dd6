-- tcl.api.json — a small strict JSON reader and writer (RFC 8259), for file headers such as
-- safetensors'. Layer: lua/tcl/api.
--
--   json.decode('{"a": [1, 2.5, "x", true, null]}')  --> { a = { 1, 2.5, "x", true, json.null } }
--   json.encode({ b = 1, a = { 1, 2 } })               --> '{"a":[1,2],"b":1}'
--
-- Reading is strict: one value and nothing but whitespace around it, no trailing commas, no
-- comments, no leading zeros, no control characters in strings, valid UTF-8, valid escapes
-- (surrogate pairs joined), no duplicate keys, at most MAX_DEPTH nested arrays and objects.
-- An error says what is wrong and at which byte (1-based): "json: expected ':' at byte 17".
-- Numbers without fraction or exponent that fit an integer are Lua integers, others floats.
-- null is json.null (a unique value), so it survives in tables; arrays are Lua lists
-- (1-based), objects tables with string keys.
--
-- Writing: strings are escaped as serde_json escapes them (the safetensors reference writer's
-- library: \" \\ \b \f \n \r \t, other control characters as \u00xx, the rest as is), object keys
-- are written sorted, a table is an array when its keys are exactly 1..n (an empty table is an
-- object: {}). Integers are written as integers; floats must be finite.
local M = {}

--- The value null decodes to.
M.null = setmetatable({}, { __name = "json.null", __tostring = function() return "null" end })

M.MAX_DEPTH = 512

local ESCAPES = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }

local LITERALS = { { "true", true }, { "false", false }, { "null", M.null } }

--- The Lua value of the JSON text s; a Lua error for malformed text. objects (optional): a
--  table in which every decoded object is set as a key, since an empty object and an empty
--  array both decode to {}.
function M.decode(s, objects)
  if type(s) ~= "string" then error("json: expected a string to decode, got " .. type(s), 0) end
  local bad = select(2, utf8.len(s))
  if bad then error(string.format("json: invalid UTF-8 at byte %d", bad), 0) end
  local pos = 1

  local function err(fmt, ...)
    error("json: " .. string.format(fmt, ...) .. " at byte " .. pos, 0)
  end

  local function skip_space()
    pos = s:find("[^ \t\r\n]", pos) or #s + 1
  end

  local function describe()
    if pos > #s then return "the end of the text" end
    local c = s:sub(pos, pos)
    if c:match("^[%g ]$") then return "'" .. c .. "'" end
    return string.format("byte 0x%02x", c:byte())
  end

  local function parse_string()
    -- pos is at the opening quote
    local parts, start = {}, pos
    pos = pos + 1
    while true do
      local stop = s:find('["\\%z\1-\31]', pos)
      if not stop then
        pos = start
        err("unterminated string")
      end
      parts[#parts + 1] = s:sub(pos, stop - 1)
      pos = stop
      local c = s:sub(pos, pos)
      if c == '"' then
        pos = pos + 1
        return table.concat(parts)
      elseif c == "\\" then
        local e = s:sub(pos + 1, pos + 1)
        if ESCAPES[e] then
          parts[#parts + 1] = ESCAPES[e]
          pos = pos + 2
        elseif e == "u" then
          local hex = s:match("^%x%x%x%x", pos + 2)
          if not hex then err("expected 4 hex digits after \\u") end
          local code = tonumber(hex, 16)
          pos = pos + 6
          if code >= 0xD800 and code <= 0xDBFF then
            local low = s:match("^\\u(%x%x%x%x)", pos)
            local low_code = low and tonumber(low, 16)
            if not low_code or low_code < 0xDC00 or low_code > 0xDFFF then
              err("a high surrogate \\u%s must be followed by a low surrogate", hex)
            end
            code = 0x10000 + (code - 0xD800) * 0x400 + (low_code - 0xDC00)
            pos = pos + 6
          elseif code >= 0xDC00 and code <= 0xDFFF then
            pos = pos - 6
            err("a low surrogate \\u%s without a high one", hex)
          end
          parts[#parts + 1] = utf8.char(code)
        else
          pos = pos + 1
          err("invalid escape '\\%s'", e == "" and "" or e)
        end
      else
        err("control character 0x%02x in a string (escape it)", c:byte())
      end
    end
  end

  -- -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [-+]? [0-9]+)?
  local function parse_number()
    local start = pos
    local int = s:match("^-?%d+", pos)
    if not int then err("invalid number") end
    if int:match("^-?0%d") then err("a number must not have leading zeros") end
    pos = pos + #int
    local fraction, exponent = false, false
    if s:sub(pos, pos) == "." then
      local digits = s:match("^%.%d+", pos)
      if not digits then err("expected digits after the decimal point") end
      pos, fraction = pos + #digits, true
    end
    if s:match("^[eE]", pos) then
      local digits = s:match("^[eE][-+]?%d+", pos)
      if not digits then err("expected digits in the exponent") end
      pos, exponent = pos + #digits, true
    end
    local value = tonumber(s:sub(start, pos - 1)) -- an integer too large for one reads as a float
    if fraction or exponent then return value + 0.0 end
    return value
  end

  local parse_value

  local function parse_array(depth)
    local list = {}
    pos = pos + 1
    skip_space()
    if s:sub(pos, pos) == "]" then
      pos = pos + 1
      return list
    end
    while true do
      list[#list + 1] = parse_value(depth)
      skip_space()
      local c = s:sub(pos, pos)
      pos = pos + 1
      if c == "]" then return list end
      if c ~= "," then
        pos = pos - 1
        err("expected ',' or ']' in an array, got %s", describe())
      end
    end
  end

  local function parse_object(depth)
    local object = {}
    if objects then objects[object] = true end
    pos = pos + 1
    skip_space()
    if s:sub(pos, pos) == "}" then
      pos = pos + 1
      return object
    end
    while true do
      skip_space()
      if s:sub(pos, pos) ~= '"' then err("expected a string key, got %s", describe()) end
      local key_pos = pos
      local key = parse_string()
      if object[key] ~= nil then
        pos = key_pos
        err("duplicate key \"%s\"", key)
      end
      skip_space()
      if s:sub(pos, pos) ~= ":" then err("expected ':' after a key, got %s", describe()) end
      pos = pos + 1
      object[key] = parse_value(depth)
      skip_space()
      local c = s:sub(pos, pos)
      pos = pos + 1
      if c == "}" then return object end
      if c ~= "," then
        pos = pos - 1
        err("expected ',' or '}' in an object, got %s", describe())
      end
    end
  end

  function parse_value(depth)
    skip_space()
    local c = s:sub(pos, pos)
    if c == "{" or c == "[" then
      if depth >= M.MAX_DEPTH then err("nested deeper than %d arrays and objects", M.MAX_DEPTH) end
      if c == "{" then return parse_object(depth + 1) end
      return parse_array(depth + 1)
    elseif c == '"' then
      return parse_string()
    elseif c == "-" or c:match("^%d$") then
      return parse_number()
    end
    for _, literal in ipairs(LITERALS) do
      local word, value = literal[1], literal[2]
      if s:sub(pos, pos + #word - 1) == word then
        pos = pos + #word
        return value
      end
    end
    err("expected a value, got %s", describe())
  end

  local value = parse_value(0)
  skip_space()
  if pos <= #s then err("unexpected %s after the value", describe()) end
  return value
end

local SHORT = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f", ["\n"] = "\\n", ["\r"] = "\\r",
  ["\t"] = "\\t" }

--- s as a JSON string literal, quoted and escaped.
function M.quote(s)
  return '"' .. s:gsub('[%z\1-\31"\\]', function(c) return SHORT[c] or string.format("\\u%04x", c:byte()) end) .. '"'
end

local function is_array(t)
  local n = #t
  if n == 0 then return false end
  local count = 0
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 or k > n then return false end
    count = count + 1
  end
  return count == n
end

local function encode(v, out, depth)
  local kind = type(v)
  if v == M.null then
    out[#out + 1] = "null"
  elseif kind == "boolean" then
    out[#out + 1] = tostring(v)
  elseif kind == "number" then
    if math.type(v) == "integer" then
      out[#out + 1] = string.format("%d", v)
    else
      if v ~= v or v == math.huge or v == -math.huge then
        error("json.encode: " .. tostring(v) .. " is not a JSON number", 0)
      end
      out[#out + 1] = string.format("%.17g", v)
    end
  elseif kind == "string" then
    out[#out + 1] = M.quote(v)
  elseif kind == "table" then
    if depth >= M.MAX_DEPTH then error("json.encode: nested deeper than " .. M.MAX_DEPTH .. " tables (a cycle?)", 0) end
    if is_array(v) then
      out[#out + 1] = "["
      for i = 1, #v do
        if i > 1 then out[#out + 1] = "," end
        encode(v[i], out, depth + 1)
      end
      out[#out + 1] = "]"
    else
      local keys = {}
      for k in pairs(v) do
        if type(k) ~= "string" then error("json.encode: object keys must be strings, got " .. type(k), 0) end
        keys[#keys + 1] = k
      end
      table.sort(keys)
      out[#out + 1] = "{"
      for i, k in ipairs(keys) do
        if i > 1 then out[#out + 1] = "," end
        out[#out + 1] = M.quote(k)
        out[#out + 1] = ":"
        encode(v[k], out, depth + 1)
      end
      out[#out + 1] = "}"
    end
  else
    error("json.encode: cannot encode a " .. kind, 0)
  end
end

--- The compact JSON text of a Lua value (see the header for the mapping).
function M.encode(v)
  local out = {}
  encode(v, out, 0)
  return table.concat(out)
end

return M
