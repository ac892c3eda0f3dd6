-- tcl.onnx.ops.losses — ONNX's NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss:
-- 0-based class targets picked by a one-hot compare (fuses; an ignored or out-of-range target
-- picks nothing), optional class weights, ignore_index, reductions none/sum/mean (mean divides
-- by the summed weights of the targets that count, as ONNX defines it).
local Tensor = require "tcl.api.tensor"

local M = {}

local function nll(ctx, node, input, target, weight)
  local shape = input:size()
  local classes = shape[2]
  if not classes then ctx:fail("input must be at least 2-d (N, C, ...), got rank %d", #shape) end
  local dtype = tostring(input.dtype)
  local tshape = target:size()
  -- target [N, d...] -> [N, 1, d...]; classes along dim 2
  local tview = { tshape[1], 1 }
  for d = 2, #tshape do tview[#tview + 1] = tshape[d] end
  local cview = { 1, classes }
  for _ = 3, #shape do cview[#cview + 1] = 1 end
  local t = target:cast("int64")
  local hot = t:reshape(tview):eq(Tensor.arange(0, classes, { dtype = "int64" }):reshape(cview))
  local ignore = node.attrs.ignore_index
  local counted = ignore and t:ne(ignore) or nil
  local picked = Tensor.where(hot, input, 0):sum(2)
  local w
  if weight then
    w = Tensor.where(hot, weight:reshape(cview), 0):sum(2)
  else
    w = Tensor.ones(tshape, { dtype = dtype })
  end
  if counted then w = Tensor.where(counted, w, 0) end
  local loss = (-picked * w):cast(dtype)
  local reduction = node.attrs.reduction or "mean"
  if reduction == "none" then return loss end
  if reduction == "sum" then return loss:sum():cast(dtype) end
  if reduction == "mean" then
    if not weight and not counted then return loss:mean():cast(dtype) end
    return (loss:sum() / w:sum()):cast(dtype)
  end
  ctx:fail("reduction must be none, sum or mean, got %s", tostring(reduction))
end

function M.NegativeLogLikelihoodLoss(ctx, node)
  return nll(ctx, node, node.inputs[1], node.inputs[2], node.inputs[3])
end

function M.SoftmaxCrossEntropyLoss(ctx, node)
  local scores = node.inputs[1]
  local log_prob = scores:log_softmax(2)
  local loss = nll(ctx, node, log_prob, node.inputs[2], node.inputs[3])
  if node.wants(2) then return loss, log_prob end
  return loss
end

return M
