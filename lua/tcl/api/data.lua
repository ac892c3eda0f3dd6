-- tcl.api.data — data for training: IDX files (the MNIST family's format), the Fashion-MNIST
-- data set, gzip files, and a DataLoader that serves (shuffled) batches. Layer: lua/tcl/api.
-- (tcl.data)
--
--   local data = require "tcl.api.data"
--   local x, y, test_x, test_y = data.fashion_mnist()             -- uint8 tensors
--   local loader = data.DataLoader({ x, y }, { batch_size = 64, shuffle = true, seed = 1 })
--   for epoch = 1, 3 do
--     for xb, yb in loader:batches() do ... end                    -- a new order each epoch
--   end
--   local batches, bar <close> = loader:batches { progress = "epoch 1" } -- with a progress bar
--   for xb, yb in batches do ...; bar:set_postfix { loss = l } end
--   -- data-parallel: rank r of n gets its share of every global batch of 64
--   local mine = data.DataLoader({ x, y }, { batch_size = 64, shuffle = true, rank = r, world_size = n })
--
-- Everything moves as bytes (Tensor.from_bytes): files are read or inflated into one string
-- and become a tensor in one copy; a batch is its rows cut out of the data set's bytes and
-- made a tensor, one from_bytes per tensor per batch, with no work per element in Lua and no
-- lazy graph over the whole data set.
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local Tensor = require "tcl.api.tensor"
local runtime = require "tcl.runtime"
local core = require "tcl.core"
local progress = require "tcl.progress"

local is_tensor, fail = class.is_tensor, check.fail
local dtypes = core.dtypes
local M = {}

--- The decompressed contents of the gzip file at path, as a string (zlib; a truncated or
--  corrupt file, or one that is not a regular file, is an error naming it).
function M.read_gzip(path)
  if type(path) ~= "string" then fail("read_gzip", "path must be a string, got %s", check.type_name(path)) end
  local ok, contents = pcall(runtime.read_gzip, path)
  if not ok then fail("read_gzip", "%s", (tostring(contents):gsub("^runtime%.read_gzip: ", ""))) end
  return contents
end

-- ---------------------------------------------------------------------------------------
-- IDX files: 0, 0, a type code, the number of dims; each dim as a big-endian uint32; the
-- values row-major, big-endian.

local IDX_DTYPES = {
  [0x08] = dtypes.uint8, [0x09] = dtypes.int8, [0x0B] = dtypes.int16, [0x0C] = dtypes.int32,
  [0x0D] = dtypes.float32, [0x0E] = dtypes.float64,
}

-- The first limit bytes of the file at path (nil: all of them), inflated when gz, and whether
-- more follow them. Only what is asked for is inflated, so a gzip bomb or a huge header costs
-- no more than the header promises; a FIFO or device is refused without reading it.
local function leading_bytes(fn, path, gz, limit)
  if gz then
    local ok, contents = pcall(runtime.read_gzip, path, limit and limit + 1)
    if not ok then fail(fn, "%s", (tostring(contents):gsub("^runtime%.read_gzip: ", ""))) end
    if limit and #contents > limit then return contents:sub(1, limit), #contents - limit end
    return contents, 0
  end
  local ok, map = pcall(runtime.map_file, path)
  if not ok then fail(fn, "%s", (tostring(map):gsub("^runtime%.map_file: ", ""))) end
  local n = limit and math.min(limit, map.size) or map.size
  return map:read(0, n), map.size - n
end

--- The tensor stored in the IDX file at path (gzip-compressed when the name ends in ".gz"),
--  of the file's shape and dtype (uint8 for the image and label files of MNIST-like sets).
--  opts: device.
function M.read_idx(path, opts)
  local fn = "read_idx"
  if type(path) ~= "string" then fail(fn, "path must be a string, got %s", check.type_name(path)) end
  opts = check.options(fn, opts, { device = true })
  local gz = path:match("%.gz$") ~= nil
  local bytes = leading_bytes(fn, path, gz, 4)
  if #bytes < 4 then fail(fn, "'%s' has %d bytes, too few for an IDX header", path, #bytes) end
  local zero1, zero2, code, ndim = bytes:byte(1, 4)
  local dtype = IDX_DTYPES[code]
  if zero1 ~= 0 or zero2 ~= 0 or not dtype then
    fail(fn, "'%s' is not an IDX file (bad magic number 0x%08x)", path, string.unpack(">I4", bytes))
  end
  local header = 4 + 4 * ndim
  bytes = leading_bytes(fn, path, gz, header)
  if #bytes < header then
    fail(fn, "'%s' is truncated: %d bytes, the header of %d dims needs %d", path, #bytes, ndim, header)
  end
  local shape, has_zero = {}, false
  for d = 1, ndim do
    shape[d] = string.unpack(">I4", bytes, 4 * d + 1)
    has_zero = has_zero or shape[d] == 0
  end
  -- checked: dims up to 2^32-1 each overflow 64 bits after two of them
  local data_bytes = 0
  if not has_zero then
    data_bytes = dtype.itemsize
    local largest = math.maxinteger - header - 1
    for d = 1, ndim do
      if data_bytes > largest // shape[d] then
        fail(fn, "'%s' declares %s %s, more than 2^63 bytes", path, dtype.name, check.shape_str(shape))
      end
      data_bytes = data_bytes * shape[d]
    end
  end
  local expected = header + data_bytes
  local excess
  bytes, excess = leading_bytes(fn, path, gz, expected)
  if #bytes < expected then
    fail(fn, "'%s' is truncated: %d bytes, its header promises %d (%s %s)", path, #bytes, expected, dtype.name,
      check.shape_str(shape))
  elseif excess > 0 then
    -- a gzip file is inflated one byte past the promise only: it says "at least"
    fail(fn, "'%s' has %s%d bytes past the %d its header promises", path, gz and "at least " or "", excess, expected)
  end
  return Tensor.from_bytes(bytes, dtype, shape,
    { offset = header, big_endian = dtype.itemsize > 1, device = opts.device })
end

--- Where the Debian package dataset-fashion-mnist installs the data set.
M.FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"

--- Fashion-MNIST from dir (default FASHION_MNIST_DIR): train_images (60000x28x28 uint8),
--  train_labels (60000 uint8, classes 0-9), test_images (10000x28x28), test_labels (10000).
function M.fashion_mnist(dir, opts)
  dir = dir or M.FASHION_MNIST_DIR
  if type(dir) ~= "string" then fail("fashion_mnist", "dir must be a string, got %s", check.type_name(dir)) end
  check.options("fashion_mnist", opts, { device = true }) -- read_idx's options, named here
  local results = {}
  for i, file in ipairs({ "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz" }) do
    local path = dir .. "/" .. file
    local f = io.open(path, "rb")
    if not f then
      fail("fashion_mnist", "cannot find %s; install the data set with `apt-get install dataset-fashion-mnist` "
        .. "(Debian), or pass the directory that holds the four Fashion-MNIST .gz files", path)
    end
    f:close()
    results[i] = M.read_idx(path, opts)
  end
  return table.unpack(results, 1, 4)
end

-- ---------------------------------------------------------------------------------------
-- DataLoader

local DataLoader = {}
DataLoader.__index = DataLoader
DataLoader.__name = "DataLoader"

-- splitmix64 (Steele, Lea, Flood): a small generator with good mixing, in Lua's wrapping
-- 64-bit integers. Returns the next state and a value.
local function splitmix(state)
  state = state + 0x9E3779B97F4A7C15
  local z = state
  z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
  z = (z ~ (z >> 27)) * 0x94D049BB133111EB
  return state, z ~ (z >> 31)
end

-- A permutation of 1..n from the seed and the epoch (Fisher-Yates). The draw in [0, i) is a
-- 53-bit value mod i: its bias, below i / 2^53, does not matter for shuffling.
local function permutation(n, seed, epoch)
  local state = splitmix(seed ~ (epoch * 0x632BE59BD9B4E019))
  local order = {}
  for i = 1, n do order[i] = i end
  for i = n, 2, -1 do
    local r
    state, r = splitmix(state)
    local j = (r >> 11) % i + 1
    order[i], order[j] = order[j], order[i]
  end
  return order
end

local LOADER_OPTIONS = { batch_size = true, shuffle = true, seed = true, drop_last = true, rank = true,
  world_size = true }

-- The rank's share of a global batch of count rows: the rows first .. first + size - 1 of it
-- (1-based). Whole batches split evenly; a partial last batch as evenly as it can, the first
-- ranks taking one row more.
local function share(count, rank, world_size)
  local base, extra = count // world_size, count % world_size
  local first = (rank - 1) * base + math.min(rank - 1, extra) + 1
  return first, base + (rank <= extra and 1 or 0)
end

--- A loader over tensors (a list, or one tensor) that share their first dim: each batch holds
--  the same rows of every tensor. opts: batch_size (default 1), shuffle (default false: rows
--  in order), seed (an integer, default 0: with shuffle, the orders of all epochs follow from
--  it), drop_last (default false: the last batch may be smaller; true: a partial batch is
--  dropped). The tensors are realized and their bytes kept on the host. #loader is the number
--  of batches an epoch has, loader.size the number of rows.
--  Data-parallel training: rank and world_size (1-based, default 1 of 1) make this the loader
--  of one process of world_size: batch_size is then the global batch, which must divide
--  evenly among the ranks, and each batch is the rank's contiguous share (batch_size /
--  world_size rows) of the global batch every rank draws alike (the same seed gives every
--  rank the same order), so the mean of the ranks' mean gradients is the global batch's. A
--  partial last batch is shared as evenly as it can be (the first ranks one row more); one of
--  fewer rows than ranks is dropped, since every rank must run the same number of steps.
--  They are explicit, not read from tcl.distributed: the data layer knows no processes, and a
--  loader for evaluation is often wanted whole on every rank.
function M.DataLoader(tensors, opts)
  local fn = "DataLoader"
  if is_tensor(tensors) then tensors = { tensors } end
  if type(tensors) ~= "table" or #tensors == 0 then
    fail(fn, "expected a tensor or a list of tensors, got %s", type(tensors) == "table" and "an empty table" or
      check.type_name(tensors))
  end
  opts = check.options(fn, opts, LOADER_OPTIONS)
  local batch_size = opts.batch_size == nil and 1 or opts.batch_size
  if math.type(batch_size) ~= "integer" or batch_size < 1 then
    fail(fn, "batch_size must be an integer >= 1, got %s", tostring(batch_size))
  end
  for _, key in ipairs({ "shuffle", "drop_last" }) do
    if opts[key] ~= nil and type(opts[key]) ~= "boolean" then
      fail(fn, "%s must be a boolean, got %s", key, check.type_name(opts[key]))
    end
  end
  local seed = opts.seed == nil and 0 or opts.seed
  if math.type(seed) ~= "integer" then fail(fn, "seed must be an integer, got %s", tostring(seed)) end
  local world_size = opts.world_size == nil and 1 or opts.world_size
  if math.type(world_size) ~= "integer" or world_size < 1 then
    fail(fn, "world_size must be an integer >= 1, got %s", tostring(world_size))
  end
  local rank = opts.rank == nil and 1 or opts.rank
  if math.type(rank) ~= "integer" or rank < 1 or rank > world_size then
    fail(fn, "rank must be an integer in 1..%d (ranks count from 1), got %s", world_size, tostring(rank))
  end
  if batch_size % world_size ~= 0 then
    fail(fn, "batch_size %d (the global batch) does not divide evenly among world_size %d ranks", batch_size,
      world_size)
  end

  local columns, rows = {}, nil
  for i, t in ipairs(tensors) do
    if not is_tensor(t) then fail(fn, "entry %d is %s, not a tensor", i, check.type_name(t)) end
    if t.ndim == 0 then fail(fn, "tensor %d has no dims: batches are cut along the first dim", i) end
    local shape = t.shape
    if rows == nil then
      rows = shape[1]
    elseif shape[1] ~= rows then
      fail(fn, "tensor %d has %d rows (shape %s), tensor 1 has %d: the first dims must match", i, shape[1],
        check.shape_str(shape), rows)
    end
    local row_shape = table.move(shape, 2, #shape, 1, {})
    columns[i] = { bytes = t:to_bytes(), dtype = t.dtype, device = t.device, row_shape = row_shape,
      row_bytes = check.numel(row_shape) * t.dtype.itemsize }
  end
  return setmetatable({ _columns = columns, _rows = rows, _batch_size = batch_size, _shuffle = opts.shuffle == true,
    _seed = seed, _drop_last = opts.drop_last == true, _epoch = 0, size = rows, rank = rank,
    world_size = world_size }, DataLoader)
end

--- The number of batches an epoch has (the same on every rank).
function DataLoader:__len()
  local whole, rest = self._rows // self._batch_size, self._rows % self._batch_size
  if self._drop_last or rest < self.world_size then return whole end
  return whole + 1
end

-- The tensor of the rows order[first .. first + count - 1] (rows in order when order is nil).
local function batch_of(column, order, first, count)
  local shape = { count, table.unpack(column.row_shape) }
  local size = column.row_bytes
  local opts = { device = column.device }
  if order == nil then
    opts.offset = (first - 1) * size
    return Tensor.from_bytes(column.bytes, column.dtype, shape, opts)
  end
  -- the rows copied in C: cut out one by one in Lua they cost half an MLP step per batch
  return Tensor.from_bytes(runtime.gather_rows(column.bytes, size, order, first, count), column.dtype, shape, opts)
end

local BATCHES_OPTIONS = { progress = true }

--- An iterator over one epoch's batches: each step gives one tensor per column, in the order
--  the loader was given them (`for x, y in loader:batches() do`). Every call starts a new
--  epoch; with shuffle each epoch has its own order, the same for the same seed.
--  opts: progress, a progress bar over the epoch's batches (tcl.progress.wrap; drawn on a
--  terminal, or as TCL_PROGRESS says): its label (a string), true (no label), or tcl.progress
--  options (total defaults to #loader, unit to "batch"). Then batches returns what
--  tcl.progress.wrap does: the iterator, the bar, nil and the bar
--  (`local batches, bar <close> = loader:batches { progress = "epoch 1" }`).
function DataLoader:batches(opts)
  opts = check.options("batches", opts, BATCHES_OPTIONS)
  local bar_opts = opts.progress
  if bar_opts ~= nil then
    if type(bar_opts) == "string" then
      bar_opts = { label = bar_opts }
    elseif bar_opts == true then
      bar_opts = {}
    elseif type(bar_opts) == "table" then
      local copy = {}
      for k, v in pairs(bar_opts) do copy[k] = v end
      bar_opts = copy
    else
      fail("batches", "progress must be a label (a string), true or a table of progress options, got %s",
        check.type_name(bar_opts))
    end
    if bar_opts.total == nil then bar_opts.total = #self end
    if bar_opts.unit == nil then bar_opts.unit = "batch" end
    return progress.wrap(self:batches(), bar_opts)
  end
  self._epoch = self._epoch + 1
  local order = self._shuffle and permutation(self._rows, self._seed, self._epoch) or nil
  local batches, batch = #self, 0
  return function()
    batch = batch + 1
    if batch > batches then return nil end
    local first = (batch - 1) * self._batch_size + 1
    local count = math.min(self._batch_size, self._rows - first + 1)
    if self.world_size > 1 then
      local offset
      offset, count = share(count, self.rank, self.world_size)
      first = first + offset - 1
    end
    local out = {}
    for i, column in ipairs(self._columns) do out[i] = batch_of(column, order, first, count) end
    return table.unpack(out)
  end
end

-- a stray argument (DataLoader(tensors, opts, extra)) is an error (check.fixed_arguments)
return check.fix_arguments(M, "")
