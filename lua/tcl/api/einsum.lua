-- tcl.api.einsum — Tensor.einsum(equation, a, b, ...): any equation (repeated labels take
-- diagonals, "..." covers leading dims numpy-style, an implicit output is the ellipsis then the
-- labels used once, sorted), lowered to broadcast products and sums of the existing ops, so it
-- fuses like a hand-written matmul. Layer: lua/tcl/api.
local check = require "tcl.api.check"
local class = require "tcl.api.class"

local M = {}

local function fail(fmt, ...) check.fail("einsum", fmt, ...) end

-- One operand's term of an einsum equation as a list of labels; "..." becomes the labels
-- "1", "2", ... of the leading dims it covers (aligned from the right, numpy-style).
local function term_labels(term, rank, ellipsis_rank)
  local labels, before, after = {}, term:match("^(.-)%.%.%.(.*)$")
  if not before then
    for c in term:gmatch("%a") do labels[#labels + 1] = c end
    return labels
  end
  local explicit = #before:gsub("%A", "") + #after:gsub("%A", "")
  local covered = rank and rank - explicit or ellipsis_rank
  if covered < 0 then fail("term %q has more labels than its operand's rank %d", term, rank) end
  for c in before:gmatch("%a") do labels[#labels + 1] = c end
  for i = ellipsis_rank - covered + 1, ellipsis_rank do labels[#labels + 1] = tostring(i) end
  for c in after:gmatch("%a") do labels[#labels + 1] = c end
  return labels
end

-- Broadcast products and sums: each operand takes the diagonal of a repeated label
-- (masked by the identity, summed), is permuted to one order of all labels, the operands are
-- multiplied and the labels not in the output summed away.
--- einsum("ij,jk->ik", a, b) (operands as arguments or one list): the sum over the labels not
--  in the output of the product of the operands, indexed by their labels.
function M.einsum(equation, ...)
  if type(equation) ~= "string" then fail("equation must be a string, got %s", check.type_name(equation)) end
  local inputs = table.pack(...)
  if inputs.n == 1 and type(inputs[1]) == "table" and not class.is_tensor(inputs[1]) then
    inputs = table.pack(table.unpack(inputs[1]))
  end
  for i = 1, inputs.n do
    if not class.is_tensor(inputs[i]) then fail("operand %d is not a Tensor but %s", i, check.type_name(inputs[i])) end
  end
  equation = equation:gsub("%s", "")
  local lhs, rhs = equation:match("^(.-)%->(.*)$")
  lhs = lhs or equation
  local terms = {}
  for term in (lhs .. ","):gmatch("([^,]*),") do terms[#terms + 1] = term end
  if #terms ~= inputs.n then fail("equation %q has %d terms for %d operands", equation, #terms, inputs.n) end
  local ellipsis_rank = 0
  for i, term in ipairs(terms) do
    if term:find("...", 1, true) then
      local explicit = #term:gsub("%A", "")
      ellipsis_rank = math.max(ellipsis_rank, #inputs[i].shape - explicit)
    end
  end
  local all, seen, count = {}, {}, {}
  local operands = {}
  for i, term in ipairs(terms) do
    local x = inputs[i]
    local labels = term_labels(term, #x.shape, ellipsis_rank)
    -- the implicit output keeps the labels used once in the whole equation ("ii" is a trace)
    for _, l in ipairs(labels) do count[l] = (count[l] or 0) + 1 end
    -- a repeated label: keep its diagonal
    local j = 1
    while j <= #labels do
      local k = j + 1
      while k <= #labels and labels[k] ~= labels[j] do k = k + 1 end
      if k <= #labels then
        local n = x.shape[j]
        local mask_shape = {}
        for d = 1, #labels do mask_shape[d] = 1 end
        mask_shape[j], mask_shape[k] = n, n
        x = x:mul(class.Tensor.eye(n, { dtype = tostring(x.dtype), device = x.device }):reshape(mask_shape)):sum(k)
        table.remove(labels, k)
      else
        j = j + 1
      end
    end
    for _, l in ipairs(labels) do
      if not seen[l] then seen[l] = true; all[#all + 1] = l end
    end
    operands[i] = { x = x, labels = labels }
  end
  local out
  if rhs then
    out = term_labels(rhs, nil, ellipsis_rank)
  else
    out = {}
    for i = 1, ellipsis_rank do out[#out + 1] = tostring(i) end
    local letters = {}
    for _, l in ipairs(all) do if l:match("%a") and count[l] == 1 then letters[#letters + 1] = l end end
    table.sort(letters)
    for _, l in ipairs(letters) do out[#out + 1] = l end
  end
  -- the order of the product: the output's labels, then the summed ones
  local order, in_out = {}, {}
  for _, l in ipairs(out) do order[#order + 1] = l; in_out[l] = true end
  for _, l in ipairs(all) do if not in_out[l] then order[#order + 1] = l end end
  local product
  for _, op in ipairs(operands) do
    local where = {}
    for d, l in ipairs(op.labels) do where[l] = d end
    local perm, shape = {}, {}
    for _, l in ipairs(order) do
      if where[l] then perm[#perm + 1] = where[l]; shape[#shape + 1] = op.x.shape[where[l]]
      else shape[#shape + 1] = 1 end
    end
    local x = op.x
    if #perm > 0 then x = x:permute(table.unpack(perm)) end
    x = x:reshape(shape)
    product = product and product:mul(x) or x
  end
  for d = #order, #out + 1, -1 do product = product:sum(d) end
  return product:cast(inputs[1].dtype)
end

return M
