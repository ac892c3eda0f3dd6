-- spec/io/data_spec.lua — tcl.api.data: IDX files (hand-built, plain and gzipped, every dtype and
-- error), the Fashion-MNIST files of the Debian package (compared with the bytes `gzip -dc`
-- gives), and the DataLoader (batches, their rows, shuffling per epoch with a seed, errors).
local helper = require "spec.support.helper"
local tcl = require "tcl"
local data = require "tcl.api.data"
local Tensor = tcl.Tensor

local fails_with = helper.fails_with

local paths = {}
local function temp_file(contents, suffix)
  local path = os.tmpname() .. (suffix or "")
  paths[#paths + 1] = path
  helper.write(path, contents)
  return path
end
teardown(function()
  for _, path in ipairs(paths) do os.remove(path) end
end)

-- An IDX file: magic (0, 0, type, ndim), the dims big-endian, then the data.
local function idx(code, shape, payload)
  local parts = { string.char(0, 0, code, #shape) }
  for _, n in ipairs(shape) do parts[#parts + 1] = string.pack(">I4", n) end
  parts[#parts + 1] = payload
  return table.concat(parts)
end

local pack_all = helper.pack_all

describe("read_idx", function()
  it("reads each IDX dtype, big-endian, into a tensor of the file's shape", function()
    local u8 = data.read_idx(temp_file(idx(0x08, { 2, 3 }, "\0\1\2\253\254\255")))
    assert.are.equal("uint8", u8.dtype.name)
    assert.are.same({ { 0, 1, 2 }, { 253, 254, 255 } }, u8:tolist())
    assert.are.same({ -128, 127 }, data.read_idx(temp_file(idx(0x09, { 2 }, "\128\127"))):tolist())
    assert.are.same({ -2, 258 }, data.read_idx(temp_file(idx(0x0B, { 2 }, pack_all(">i2", { -2, 258 })))):tolist())
    assert.are.same({ { -70000 }, { 5 } },
      data.read_idx(temp_file(idx(0x0C, { 2, 1 }, pack_all(">i4", { -70000, 5 })))):tolist())
    local f32 = data.read_idx(temp_file(idx(0x0D, { 3 }, pack_all(">f", { 1.5, -0.25, 1024 }))))
    assert.are.equal("float32", f32.dtype.name)
    assert.are.same({ 1.5, -0.25, 1024.0 }, f32:tolist())
    assert.are.same({ 0.1 }, data.read_idx(temp_file(idx(0x0E, { 1 }, pack_all(">d", { 0.1 }))), { device = "EMU" })
      :tolist())
    assert.are.same({}, data.read_idx(temp_file(idx(0x08, { 0, 5 }, ""))):tolist())
  end)

  it("reads gzipped files by their .gz name", function()
    local plain = temp_file(idx(0x08, { 4 }, "\9\8\7\6"))
    assert.are.equal(0, (helper.run("gzip -n -k -f " .. helper.shell_quote(plain))))
    paths[#paths + 1] = plain .. ".gz"
    assert.are.same({ 9, 8, 7, 6 }, data.read_idx(plain .. ".gz"):tolist())
    assert.are.equal(idx(0x08, { 4 }, "\9\8\7\6"), data.read_gzip(plain .. ".gz"))
  end)

  it("fails on files that are not IDX or are cut short, naming them", function()
    local short = temp_file("\0\0")
    fails_with("read_idx: '" .. short .. "' has 2 bytes, too few for an IDX header", data.read_idx, short)
    local bad = temp_file("\0\1\8\1" .. string.pack(">I4", 1) .. "\0")
    fails_with("read_idx: '" .. bad .. "' is not an IDX file (bad magic number 0x00010801)", data.read_idx, bad)
    local unknown = temp_file("\0\0\7\1" .. string.pack(">I4", 1) .. "\0")
    fails_with("is not an IDX file (bad magic number 0x00000701)", data.read_idx, unknown)
    local cut_header = temp_file("\0\0\8\3" .. string.pack(">I4", 1))
    fails_with("is truncated: 8 bytes, the header of 3 dims needs 16", data.read_idx, cut_header)
    local cut_data = temp_file(idx(0x0C, { 2, 2 }, "\0\0\0\1\0\0\0\2"))
    fails_with("'" .. cut_data .. "' is truncated: 20 bytes, its header promises 28 (int32 (2, 2))", data.read_idx,
      cut_data)
    local long = temp_file(idx(0x08, { 2 }, "\1\2\3"))
    fails_with("has 1 bytes past the 10 its header promises", data.read_idx, long)
    fails_with("read_idx: cannot open '/nonexistent/x'", data.read_idx, "/nonexistent/x")
    local not_gz = temp_file(idx(0x08, { 1 }, "\1"), ".gz")
    fails_with("read_idx: '" .. not_gz .. "' is not a gzip file", data.read_idx, not_gz)
    fails_with("read_gzip: cannot open '/nonexistent/x.gz'", data.read_gzip, "/nonexistent/x.gz")
  end)
end)

describe("read_idx bounds", function()
  it("stops inflating one byte past what the header promises (a gzip bomb is rejected at once)", function()
    local plain = temp_file(idx(0x08, { 1 }, "\1"))
    local bomb = plain .. ".gz"
    paths[#paths + 1] = bomb
    -- the 9-byte IDX file followed by 64 MiB of zeros, about 64 KB compressed
    assert.are.equal(0, (helper.run("{ { cat " .. helper.shell_quote(plain)
      .. "; head -c 67108864 /dev/zero; } | gzip -1 -n > " .. helper.shell_quote(bomb) .. "; }")))
    local started = os.clock()
    fails_with("read_idx: '" .. bomb .. "' has at least 1 bytes past the 9 its header promises", data.read_idx, bomb)
    assert.is_true(os.clock() - started < 0.5, "the bomb was inflated")
    -- read_gzip itself has no promise to go by: it inflates everything
    assert.are.equal(9 + 67108864, #data.read_gzip(bomb))
  end)

  it("checks the header's size arithmetic, naming the file", function()
    local huge = temp_file(idx(0x08, { 0xFFFFFFFF, 0xFFFFFFFF }, ""))
    fails_with("read_idx: '" .. huge .. "' declares uint8 (4294967295, 4294967295), more than 2^63 bytes",
      data.read_idx, huge)
    local wraps = temp_file(idx(0x08, { 65536, 65536, 65536, 65536 }, ""))
    fails_with("read_idx: '" .. wraps .. "' declares uint8 (65536, 65536, 65536, 65536), more than 2^63 bytes",
      data.read_idx, wraps)
    local wide = temp_file(idx(0x0E, { 65536, 65536, 65536, 4096 }, ""))
    fails_with("read_idx: '" .. wide .. "' declares float64 (65536, 65536, 65536, 4096), more than 2^63 bytes",
      data.read_idx, wide)
    -- a zero dim makes the rest harmless
    assert.are.same({ 0, 0xFFFFFFFF }, data.read_idx(temp_file(idx(0x08, { 0, 0xFFFFFFFF }, ""))).shape)
  end)

  it("refuses FIFOs and devices without blocking, naming them", function()
    local fifo = os.tmpname()
    os.remove(fifo)
    local fifo_gz = fifo .. ".gz"
    paths[#paths + 1], paths[#paths + 2] = fifo, fifo_gz
    assert.are.equal(0, (helper.run("mkfifo " .. helper.shell_quote(fifo) .. " " .. helper.shell_quote(fifo_gz))))
    local script = temp_file(([[
local data = require "tcl.api.data"
local state = require "tcl.api.state"
for _, call in ipairs({ { data.read_idx, %q }, { data.read_idx, %q }, { data.read_gzip, %q },
    { data.read_idx, "/dev/zero" }, { data.read_idx, "/dev/zero.gz" }, { state.safe_load, %q } }) do
  local ok, err = pcall(call[1], call[2])
  print(ok and "ok" or tostring(err):match("[^\n]*"))
end
]]):format(fifo, fifo_gz, fifo, fifo), ".lua")
    local status, out = helper.run("env -u TCLC_LUA_DIR TCL_LUA_DIR=" .. helper.shell_quote(helper.root .. "/lua")
      .. " timeout 30 " .. helper.shell_quote(helper.tcl_bin) .. " " .. helper.shell_quote(script))
    assert.are.equal(0, status, out)
    assert.are.equal(table.concat({
      "read_idx: '" .. fifo .. "' is not a regular file",
      "read_idx: '" .. fifo_gz .. "' is not a regular file",
      "read_gzip: '" .. fifo .. "' is not a regular file",
      "read_idx: '/dev/zero' is not a regular file",
      "read_idx: cannot open '/dev/zero.gz': No such file or directory",
      "safe_load: '" .. fifo .. "' is not a regular file",
    }, "\n") .. "\n", out)
  end)
end)

describe("fashion_mnist", function()
  local dir = data.FASHION_MNIST_DIR
  local present = helper.exists(dir .. "/train-labels-idx1-ubyte.gz")

  -- The first n bytes of a gzipped file, as the gzip program decompresses it.
  local function gunzip_head(path, n)
    local pipe = assert(io.popen("gzip -dc " .. helper.shell_quote(path) .. " | head -c " .. n))
    local bytes = pipe:read("a")
    pipe:close()
    return bytes
  end

  it("loads the four files of the Debian package", function()
    if not present then
      pending("Fashion-MNIST is not installed in " .. dir .. " (apt-get install dataset-fashion-mnist)")
      return
    end
    local train_x, train_y, test_x, test_y = data.fashion_mnist()
    assert.are.same({ 60000, 28, 28 }, train_x.shape)
    assert.are.same({ 60000 }, train_y.shape)
    assert.are.same({ 10000, 28, 28 }, test_x.shape)
    assert.are.same({ 10000 }, test_y.shape)
    for _, t in ipairs({ train_x, train_y, test_x, test_y }) do assert.are.equal("uint8", t.dtype.name) end
    -- labels: an 8-byte header, then one byte per image
    local labels = gunzip_head(dir .. "/train-labels-idx1-ubyte.gz", 8 + 20)
    assert.are.equal(string.char(0, 0, 8, 1) .. string.pack(">I4", 60000), labels:sub(1, 8))
    assert.are.same({ labels:byte(9, 28) }, train_y:slice({ 1, 20 }):tolist())
    local test_labels = gunzip_head(dir .. "/t10k-labels-idx1-ubyte.gz", 8 + 5)
    assert.are.same({ test_labels:byte(9, 13) }, test_y:slice({ 1, 5 }):tolist())
    -- images: a 16-byte header, then 28 * 28 bytes per image
    local images = gunzip_head(dir .. "/train-images-idx3-ubyte.gz", 16 + 2 * 784)
    assert.are.equal(images:sub(17), train_x:slice({ 1, 2 }):to_bytes())
    local total = 0
    for _, label in ipairs(train_y:data()) do
      assert.is_true(label >= 0 and label <= 9)
      total = total + 1
    end
    assert.are.equal(60000, total)
  end)

  it("says which package to install when the files are missing", function()
    local missing = os.tmpname()
    os.remove(missing)
    fails_with("fashion_mnist: cannot find " .. missing .. "/train-images-idx3-ubyte.gz; install the data set with "
      .. "`apt-get install dataset-fashion-mnist`", data.fashion_mnist, missing)
  end)
end)

describe("runtime.gather_rows (the DataLoader's shuffled rows)", function()
  local gather_rows = require("tcl.runtime").gather_rows

  it("copies the listed rows in order, from any place in the list", function()
    local s = "aaabbbcccddd" -- rows of 3 bytes: 1 aaa, 2 bbb, 3 ccc, 4 ddd
    assert.are.equal("dddaaabbb", gather_rows(s, 3, { 4, 1, 2 }, 1, 3))
    assert.are.equal("cccccc", gather_rows(s, 3, { 1, 3, 3 }, 2, 2))
    assert.are.equal("", gather_rows(s, 3, {}, 1, 0))
    assert.are.equal("d", gather_rows("abcd", 1, { 4 }, 1, 1))
  end)

  it("refuses rows outside the data, an order too short and bad sizes, naming them", function()
    local s = "aaabbb"
    fails_with("gather_rows: order[2] is not a row of the data (1 to 2)", gather_rows, s, 3, { 1, 3 }, 1, 2)
    fails_with("gather_rows: order[1] is not a row of the data (1 to 2)", gather_rows, s, 3, { 0 }, 1, 1)
    fails_with("gather_rows: order[1] is not a row of the data (1 to 2)", gather_rows, s, 3, { 1.5 }, 1, 1)
    fails_with("gather_rows: rows 2 to 3 of an order of 2", gather_rows, s, 3, { 1, 2 }, 2, 2)
    fails_with("gather_rows: row_bytes must be >= 1, got 0", gather_rows, s, 0, { 1 }, 1, 1)
    fails_with("gather_rows: first must be >= 1, got 0", gather_rows, s, 3, { 1 }, 0, 1)
    fails_with("gather_rows: count must be >= 0, got -1", gather_rows, s, 3, { 1 }, 1, -1)
  end)
end)

describe("DataLoader", function()
  -- rows r = 1..n: x[r] = {r, -r} (int32), y[r] = r (uint8)
  local function dataset(n)
    local xs, ys = {}, {}
    for r = 1, n do
      xs[r] = { r, -r }
      ys[r] = r
    end
    return Tensor(xs, { dtype = "int32" }), Tensor(ys, { dtype = "uint8" })
  end

  it("serves the rows in order, the last batch smaller", function()
    local x, y = dataset(10)
    local loader = data.DataLoader({ x, y }, { batch_size = 4 })
    assert.are.equal(3, #loader)
    assert.are.equal(10, loader.size)
    local seen = {}
    for xb, yb in loader:batches() do seen[#seen + 1] = { xb:tolist(), yb:tolist(), xb.dtype.name, yb.dtype.name } end
    assert.are.same({
      { { { 1, -1 }, { 2, -2 }, { 3, -3 }, { 4, -4 } }, { 1, 2, 3, 4 }, "int32", "uint8" },
      { { { 5, -5 }, { 6, -6 }, { 7, -7 }, { 8, -8 } }, { 5, 6, 7, 8 }, "int32", "uint8" },
      { { { 9, -9 }, { 10, -10 } }, { 9, 10 }, "int32", "uint8" },
    }, seen)
  end)

  it("drops a partial last batch with drop_last", function()
    local x = dataset(10)
    local loader = data.DataLoader(x, { batch_size = 4, drop_last = true })
    assert.are.equal(2, #loader)
    local count = 0
    for xb in loader:batches() do
      count = count + 1
      assert.are.same({ 4, 2 }, xb.shape)
    end
    assert.are.equal(2, count)
    assert.are.equal(0, #data.DataLoader(x, { batch_size = 11, drop_last = true }))
    assert.are.equal(1, #data.DataLoader(x, { batch_size = 11 }))
    assert.are.equal(10, #data.DataLoader(x))
  end)

  -- One epoch's row order, checking that x and y rows stay together.
  local function epoch_order(loader)
    local order = {}
    for xb, yb in loader:batches() do
      local xs, ys = xb:tolist(), yb:tolist()
      for i, row in ipairs(xs) do
        assert.are.same({ ys[i], -ys[i] }, row)
        order[#order + 1] = ys[i]
      end
    end
    return order
  end

  it("shuffles every epoch anew, each a permutation, the same for the same seed", function()
    local x, y = dataset(50)
    local a = data.DataLoader({ x, y }, { batch_size = 8, shuffle = true, seed = 7 })
    local b = data.DataLoader({ x, y }, { batch_size = 8, shuffle = true, seed = 7 })
    local c = data.DataLoader({ x, y }, { batch_size = 8, shuffle = true, seed = 8 })
    local first, second = epoch_order(a), epoch_order(a)
    for _, order in ipairs({ first, second }) do
      local sorted = table.move(order, 1, #order, 1, {})
      table.sort(sorted)
      local expected = {}
      for r = 1, 50 do expected[r] = r end
      assert.are.same(expected, sorted)
    end
    assert.are_not.same(first, second)
    assert.are.same(first, epoch_order(b))
    assert.are.same(second, epoch_order(b))
    assert.are_not.same(first, epoch_order(c))
    local in_order = {}
    for r = 1, 50 do in_order[r] = r end
    assert.are_not.same(in_order, first)
  end)

  it("gives each rank its contiguous share of every shuffled global batch, the shares the whole batch", function()
    local x, y = dataset(22)
    local whole = data.DataLoader({ x, y }, { batch_size = 6, shuffle = true, seed = 3 })
    local ranks = {}
    for r = 1, 3 do
      ranks[r] = data.DataLoader({ x, y }, { batch_size = 6, shuffle = true, seed = 3, rank = r, world_size = 3 })
      assert.are.equal(4, #ranks[r]) -- 3 whole batches and the last 4 rows, shared 2, 1, 1
      assert.are.equal(r, ranks[r].rank)
      assert.are.equal(3, ranks[r].world_size)
    end
    for _ = 1, 2 do -- two epochs: each its own order, the same on every rank
      local batches = {}
      for xb, yb in whole:batches() do batches[#batches + 1] = { xb:tolist(), yb:tolist() } end
      local shares = {}
      for r = 1, 3 do
        shares[r] = {}
        for xb, yb in ranks[r]:batches() do shares[r][#shares[r] + 1] = { xb:tolist(), yb:tolist() } end
      end
      for b, batch in ipairs(batches) do
        local sizes, joined_x, joined_y = {}, {}, {}
        for r = 1, 3 do
          local part = shares[r][b]
          sizes[r] = #part[2]
          table.move(part[1], 1, #part[1], #joined_x + 1, joined_x)
          table.move(part[2], 1, #part[2], #joined_y + 1, joined_y)
        end
        assert.are.same(b <= 3 and { 2, 2, 2 } or { 2, 1, 1 }, sizes)
        assert.are.same(batch, { joined_x, joined_y })
      end
    end
  end)

  it("drops, on every rank, a last batch of fewer rows than ranks", function()
    local x = dataset(13)
    for r = 1, 4 do
      local loader = data.DataLoader(x, { batch_size = 4, rank = r, world_size = 4 })
      assert.are.equal(3, #loader)
      local rows = {}
      for xb in loader:batches() do rows[#rows + 1] = xb:tolist()[1][1] end
      assert.are.same({ r, 4 + r, 8 + r }, rows)
    end
    assert.are.equal(4, #data.DataLoader(x, { batch_size = 4 })) -- one process keeps the 13th row
  end)

  it("fails on inconsistent tensors and bad options", function()
    local x, y = dataset(4)
    fails_with("DataLoader: tensor 2 has 3 rows (shape (3,)), tensor 1 has 4: the first dims must match",
      data.DataLoader, { x, Tensor({ 1, 2, 3 }) })
    fails_with("DataLoader: batch_size must be an integer >= 1, got 0", data.DataLoader, { x, y }, { batch_size = 0 })
    fails_with("DataLoader: batch_size must be an integer >= 1, got 1.5", data.DataLoader, x, { batch_size = 1.5 })
    fails_with("DataLoader: entry 2 is number, not a tensor", data.DataLoader, { x, 5 })
    fails_with("DataLoader: tensor 1 has no dims", data.DataLoader, { Tensor(1) })
    fails_with("DataLoader: expected a tensor or a list of tensors, got an empty table", data.DataLoader, {})
    fails_with("DataLoader: unknown option 'batchsize'", data.DataLoader, x, { batchsize = 2 })
    fails_with("DataLoader: shuffle must be a boolean, got number", data.DataLoader, x, { shuffle = 1 })
    fails_with("DataLoader: seed must be an integer, got 0.5", data.DataLoader, x, { seed = 0.5 })
    fails_with("DataLoader: world_size must be an integer >= 1, got 0", data.DataLoader, x, { world_size = 0 })
    fails_with("DataLoader: rank must be an integer in 1..2 (ranks count from 1), got 0", data.DataLoader, x,
      { rank = 0, world_size = 2 })
    fails_with("DataLoader: rank must be an integer in 1..1 (ranks count from 1), got 2", data.DataLoader, x,
      { rank = 2 })
    fails_with("DataLoader: batch_size 3 (the global batch) does not divide evenly among world_size 2 ranks",
      data.DataLoader, x, { batch_size = 3, rank = 1, world_size = 2 })
  end)

  it("batches Fashion-MNIST quickly", function()
    if not helper.exists(data.FASHION_MNIST_DIR .. "/train-labels-idx1-ubyte.gz") then
      pending("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
      return
    end
    local x, y = data.fashion_mnist()
    local loader = data.DataLoader({ x, y }, { batch_size = 256, shuffle = true, seed = 1 })
    assert.are.equal(235, #loader)
    local rows = 0
    for xb, yb in loader:batches() do
      rows = rows + xb.shape[1]
      assert.are.equal(xb.shape[1], yb.shape[1])
    end
    assert.are.equal(60000, rows)
  end)
end)
