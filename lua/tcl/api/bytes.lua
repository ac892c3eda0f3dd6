-- tcl.api.bytes — tensors to and from raw bytes: Tensor.from_bytes and t:to_bytes. Layer:
-- lua/tcl/api.
--
--   local t = Tensor.from_bytes(s, "float32", {2, 3})      -- 24 bytes, little-endian
--   local u = Tensor.from_bytes(s, "uint8", {60000, 28, 28}, { offset = 16 })  -- skip a header
--   assert(t:to_bytes() == s)
--
-- The bytes are an element's storage format (src/runtime/buffer.h): little-endian integers
-- and floats, bool as the bytes 0 and 1, the narrow floats as their bit patterns. They move in
-- one copy between a Lua string and a buffer, with no work per element in Lua, so files and
-- data sets of tens of megabytes load at memory speed.
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local nodes = require "tcl.api.nodes"
local rules = require "tcl.api.dtype_rules"
local buffers = require "tcl.schedule.buffers"
local events = require "tcl.codegen.driver.events"
local variables = require "tcl.variables"
local index_checks = require "tcl.api.index_checks"

local fail, wrap = check.fail, class.wrap
local M = {}

local OPTIONS = { device = true, offset = true, big_endian = true }

--- A tensor of the given dtype and shape (a table of sizes, or one size) holding the bytes of
--  the string s. opts: device (default: the default device); offset (bytes of s to skip; then
--  s may be longer than the tensor needs, else #s must be exactly numel * itemsize);
--  big_endian = true when each element's bytes are stored most significant first (IDX files).
function M.from_bytes(s, dtype, shape, opts)
  if type(s) ~= "string" then fail("from_bytes", "expected a string of bytes, got %s", check.type_name(s)) end
  local dt = rules.dtype("from_bytes", dtype)
  shape = check.shape("from_bytes", shape)
  opts = check.options("from_bytes", opts, OPTIONS)
  local device = opts.device == nil and class.default_device("from_bytes") or opts.device
  if type(device) ~= "string" then fail("from_bytes", "device must be a string, got %s", check.type_name(device)) end
  local ok, checked = pcall(class.checked_device, "from_bytes", device)
  if not ok then fail("from_bytes", "%s", (checked:gsub("^[^:]*: ", ""))) end
  local offset = opts.offset
  if offset ~= nil and (math.type(offset) ~= "integer" or offset < 0) then
    fail("from_bytes", "offset must be an integer >= 0, got %s", tostring(offset))
  end
  if opts.big_endian ~= nil and type(opts.big_endian) ~= "boolean" then
    fail("from_bytes", "big_endian must be a boolean, got %s", check.type_name(opts.big_endian))
  end
  local numel = check.numel(shape)
  local nbytes = numel * dt.itemsize
  if offset == nil and #s ~= nbytes then
    fail("from_bytes", "%d bytes given, a %s tensor of shape %s needs %d", #s, dt.name, check.shape_str(shape), nbytes)
  elseif offset ~= nil and offset + nbytes > #s then
    fail("from_bytes", "%d bytes given, a %s tensor of shape %s needs %d from offset %d", #s, dt.name,
      check.shape_str(shape), nbytes, offset)
  end
  local node = buffers.new(dt, numel, checked)
  local storage = buffers.get(node)
  local start = events.on() and events.clock()
  local ok_write, err = pcall(storage.write_bytes, storage, s, offset or 0, opts.big_endian)
  if not ok_write then fail("from_bytes", "%s", (tostring(err):gsub("^Buffer:write_bytes: ", ""))) end
  if start then buffers.copied("write from host", storage.device, start, nbytes) end
  return nodes.reshape(wrap(node, { numel }, checked), shape)
end

--- The tensor's values as a string of bytes in storage order (row-major, little-endian):
--  numel * itemsize bytes. Realizes the tensor.
function M.to_bytes(t)
  check.tensor("to_bytes", t)
  t:realize()
  local node = buffers.viewed(t.uop)
  if node == nil then
    fail("to_bytes", "realize gave a %s node, not a buffer, for a tensor of shape %s", t.uop.op,
      check.shape_str(t._shape))
  end
  if buffers.read_hook then buffers.read_hook(node) end
  index_checks.report(t.device) -- every read to the host reports the failed index checks
  local storage = buffers.get(node)
  local numel = check.numel(t._shape)
  -- a tensor of variable size (tcl.var) is stored at its largest size, its elements first
  local symbolic = variables.is_symbolic(numel)
  local expected = (symbolic and variables.value(numel) or numel) * t.uop.dtype.itemsize
  if storage.nbytes ~= expected and not (symbolic and storage.nbytes > expected) then
    fail("to_bytes", "the buffer holds %d bytes, the tensor of shape %s %d", storage.nbytes,
      check.shape_str(t._shape), expected)
  end
  local start = events.on() and events.clock()
  local data = storage:read_bytes()
  if start then buffers.copied("read to host", storage.device, start, #data) end
  return #data == expected and data or data:sub(1, expected)
end

return M
