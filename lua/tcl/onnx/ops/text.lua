-- tcl.onnx.ops.text — ONNX's TfIdfVectorizer on integer inputs, counted on the host (the
-- n-gram matching is data-dependent): 1-D [C] or 2-D [N, C] input, output float32 [(N,) width].
local Tensor = require "tcl.api.tensor"

local M = {}

function M.TfIdfVectorizer(ctx, node)
  local a = node.attrs
  local x = node.inputs[1]
  local shape = x:size()
  local rows, cols = #shape == 2 and shape[1] or 1, shape[#shape]
  local v = ctx:ints(x)
  if a.pool_strings then ctx:fail("string pools are not representable in tcl") end
  local pool, counts, indexes = a.pool_int64s, a.ngram_counts, a.ngram_indexes
  local width = 0
  for _, ix in ipairs(indexes) do if ix + 1 > width then width = ix + 1 end end
  -- key "n:a,b,..." -> output column (0-based)
  local map, id = {}, 0
  for g = 1, #counts do
    local first = counts[g] + 1
    local last = g < #counts and counts[g + 1] or #pool
    for s = first, last, g do
      local key = {}
      for j = 0, g - 1 do key[#key + 1] = pool[s + j] end
      id = id + 1
      map[g .. ":" .. table.concat(key, ",")] = indexes[id]
    end
  end
  local minn, maxn, maxskip = a.min_gram_length or 1, a.max_gram_length or 1, a.max_skip_count or 0
  local out = {}
  for i = 1, rows * width do out[i] = 0.0 end
  for r = 0, rows - 1 do
    local base = r * cols
    for n = minn, maxn do
      for skip = 0, (n == 1 and 0 or maxskip) do
        local span = (n - 1) * (skip + 1)
        for s = 0, cols - 1 - span do
          local key = {}
          for j = 0, n - 1 do key[#key + 1] = v[base + s + j * (skip + 1) + 1] end
          local col = map[n .. ":" .. table.concat(key, ",")]
          if col then out[r * width + col + 1] = out[r * width + col + 1] + 1 end
        end
      end
    end
  end
  local mode = a.mode or "TF"
  local weights = a.weights
  if mode ~= "TF" then
    for r = 0, rows - 1 do
      for c = 0, width - 1 do
        local k = r * width + c + 1
        local w = weights and weights[c + 1] or 1.0
        if mode == "IDF" then out[k] = out[k] > 0 and w or 0.0 else out[k] = out[k] * w end
      end
    end
  end
  local oshape = #shape == 2 and { rows, width } or { width }
  return Tensor.from_bytes(string.pack(string.rep("<f", #out), table.unpack(out)), "float32", oshape)
end

return M
