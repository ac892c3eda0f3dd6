-- tcl.onnx.wire — a protobuf wire-format decoder driven by a schema (lua/tcl/onnx/schema.lua).
-- It reads a file through a memory map (runtime.map_file) in windows, so a model's weights are
-- never copied into Lua: a `bytes` field marked `blob` in the schema decodes to {offset, length}
-- in the file, and the tensor is made over the mapping (lua/tcl/onnx/tensor_proto.lua).
-- Every length is checked against the end of its enclosing message before it is used, nesting
-- is limited, and unknown fields are skipped by their wire type: a truncated or hostile file is
-- an error naming the file, the message, the field and the byte, never a crash.
local runtime = require "tcl.runtime"

local M = {}

M.MAX_DEPTH = 64          -- nested messages (graphs in attributes in graphs...)
local WINDOW = 1 << 20    -- bytes read from the mapping at a time

local Reader = {}
Reader.__index = Reader

--- A reader over the whole file at path (an error naming the file if it cannot be mapped).
function M.open(path)
  local ok, map = pcall(runtime.map_file, path)
  if not ok then error(tostring(map):gsub("^runtime%.map_file: ", ""), 0) end
  return setmetatable({ path = path, map = map, size = map.size, base = 0, buf = "" }, Reader)
end

--- A reader over a string already in memory (tests, small embedded messages).
function M.from_string(s, name)
  return setmetatable({ path = name or "<string>", size = #s, base = 0, buf = s, whole = true }, Reader)
end

function Reader:fail(where, pos, fmt, ...)
  error(string.format("%s: %s at byte %d: %s", self.path, where, pos, string.format(fmt, ...)), 0)
end

-- Makes bytes [pos, pos + n) available in self.buf; returns the index of pos in it.
function Reader:window(pos, n)
  local base, buf = self.base, self.buf
  if pos >= base and pos + n <= base + #buf then return pos - base + 1 end
  local length = math.max(n, WINDOW)
  if pos + length > self.size then length = self.size - pos end
  self.base, self.buf = pos, self.map:read(pos, length)
  return 1
end

function Reader:byte_at(pos)
  local i = self:window(pos, 1)
  return self.buf:byte(i)
end

function Reader:bytes(pos, n)
  if n == 0 then return "" end
  local i = self:window(pos, n)
  return self.buf:sub(i, i + n - 1)
end

-- A varint starting at pos, which must end before stop: its value (64-bit, wrapping like int64)
-- and the position after it.
function Reader:varint(pos, stop, where)
  local value, shift = 0, 0
  while true do
    if pos >= stop then self:fail(where, pos, "truncated varint") end
    local b = self:byte_at(pos)
    pos = pos + 1
    value = value | ((b & 0x7f) << shift)
    if b < 0x80 then return value, pos end
    shift = shift + 7
    if shift >= 70 then self:fail(where, pos, "varint longer than 10 bytes") end
  end
end

local SCALAR = {
  int = true, uint = true, sint = true, bool = true, float = true, double = true,
}

local function zigzag(v) return (v >> 1) ~ -(v & 1) end

-- One scalar of kind from wire type wt at pos; its value and the next position.
function Reader:scalar(kind, wt, pos, stop, where)
  if wt == 0 then
    local v
    v, pos = self:varint(pos, stop, where)
    if kind == "float" or kind == "double" then self:fail(where, pos, "a varint for a %s field", kind) end
    if kind == "bool" then return v ~= 0, pos end
    if kind == "sint" then return zigzag(v), pos end
    return v, pos
  elseif wt == 5 then
    if pos + 4 > stop then self:fail(where, pos, "truncated 32-bit value") end
    local s = self:bytes(pos, 4)
    if kind == "float" then return (string.unpack("<f", s)), pos + 4 end
    if kind == "double" then self:fail(where, pos, "a 32-bit value for a double field") end
    return (string.unpack("<i4", s)), pos + 4
  elseif wt == 1 then
    if pos + 8 > stop then self:fail(where, pos, "truncated 64-bit value") end
    local s = self:bytes(pos, 8)
    if kind == "double" then return (string.unpack("<d", s)), pos + 8 end
    if kind == "float" then self:fail(where, pos, "a 64-bit value for a float field") end
    return (string.unpack("<i8", s)), pos + 8
  end
  self:fail(where, pos, "wire type %d for a %s field", wt, kind)
end

-- Skips a field of wire type wt at pos; the next position.
function Reader:skip(wt, pos, stop, where)
  if wt == 0 then
    local _
    _, pos = self:varint(pos, stop, where)
    return pos
  elseif wt == 1 then pos = pos + 8
  elseif wt == 5 then pos = pos + 4
  elseif wt == 2 then
    local n
    n, pos = self:varint(pos, stop, where)
    if n < 0 or n > stop - pos then self:fail(where, pos, "length %d runs past the end of the message", n) end
    pos = pos + n
  else
    self:fail(where, pos, "unsupported wire type %d (groups are not used by ONNX)", wt)
  end
  if pos > stop then self:fail(where, pos, "field runs past the end of the message") end
  return pos
end

--- Decodes the message of schema `schema` in bytes [pos, stop): a table with one entry per
--- field name (a list for repeated fields; absent fields are nil). depth counts nesting.
function Reader:message(schema, pos, stop, depth)
  depth = depth or 1
  if depth > M.MAX_DEPTH then self:fail(schema.name, pos, "messages nested deeper than %d", M.MAX_DEPTH) end
  local out = {}
  local fields = schema.fields
  while pos < stop do
    local key
    key, pos = self:varint(pos, stop, schema.name)
    local number, wt = key >> 3, key & 7
    local field = fields[number]
    if not field then
      pos = self:skip(wt, pos, stop, schema.name)
    else
      local where = schema.name .. "." .. field.name
      local value
      if field.message or field.kind == "string" or field.kind == "bytes" or field.kind == "blob" then
        if wt ~= 2 then self:fail(where, pos, "wire type %d, expected 2 (length-delimited)", wt) end
        local n
        n, pos = self:varint(pos, stop, where)
        if n < 0 or n > stop - pos then
          self:fail(where, pos, "length %d runs past the end of the enclosing message (%d bytes left)", n, stop - pos)
        end
        if field.message then
          value = self:message(field.message, pos, pos + n, depth + 1)
        elseif field.kind == "blob" then
          value = { offset = pos, length = n }
        else
          value = self:bytes(pos, n)
        end
        pos = pos + n
        if field.repeated then
          local list = out[field.name] or {}
          list[#list + 1] = value
          out[field.name] = list
        else
          out[field.name] = value
        end
      elseif SCALAR[field.kind] then
        if field.repeated and wt == 2 then -- packed
          local n
          n, pos = self:varint(pos, stop, where)
          if n < 0 or n > stop - pos then
            self:fail(where, pos, "packed length %d runs past the end of the message (%d bytes left)", n, stop - pos)
          end
          local list, last = out[field.name] or {}, pos + n
          local count = #list
          local ewt = (field.kind == "float") and 5 or (field.kind == "double") and 1 or 0
          while pos < last do
            count = count + 1
            list[count], pos = self:scalar(field.kind, ewt, pos, last, where)
          end
          out[field.name] = list
        else
          value, pos = self:scalar(field.kind, wt, pos, stop, where)
          if field.repeated then
            local list = out[field.name] or {}
            list[#list + 1] = value
            out[field.name] = list
          else
            out[field.name] = value
          end
        end
      else
        error("wire: schema field " .. where .. " has unknown kind " .. tostring(field.kind))
      end
    end
  end
  if pos ~= stop then self:fail(schema.name, pos, "message ends %d bytes past its length", pos - stop) end
  return out
end

--- Decodes the whole file (or string) as one message of schema.
function Reader:decode(schema)
  return self:message(schema, 0, self.size, 1)
end

return M
